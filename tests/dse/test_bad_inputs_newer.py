"""Bad inputs on the newer surfaces (pipeline, show, compare, sweep, init, report, export/evaluate, layer,
models, surrogate, ONNX and SCALE-Sim imports, unwritable outputs): every case exits 2 with one line naming the
option or field, or succeeds with standard output; nothing is left behind; no existing file is lost.

Commands run in this process (the ``cli`` fixture) except where the behaviour needs a process of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from readonly import read_only
from studyfiles import edit, write_study

HUGE = "99999999999999999999"


def _strict_json(text: str):
    """``json.loads`` that refuses what standard JSON does not have (NaN, Infinity)."""
    def refuse(name):
        raise AssertionError(f"not standard JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def _refused(r, *needles: str) -> str:
    """The one error line of an exit-2 result, holding every needle."""
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("dse: error: "), r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _listing(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` (hidden ones too) with its content (None for folders)."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """Two small studies that ran (the session's and a second one, for compare), and an exported knee."""
    import dse
    from dse.search.studyfile import load_study

    folder = tmp_path_factory.mktemp("newer")
    first = write_study(folder, name="tiny.toml")
    second = write_study(folder, edit('name = "tiny"', 'name = "other"'), name="other.toml")
    old = os.environ.get("DSE_CACHE_DIR")
    os.environ["DSE_CACHE_DIR"] = str(tmp_path_factory.getbasetemp() / "dse-cache")
    try:
        for f, n in ((first, 4), (second, 3)):
            assert dse.run(load_study(f), trials=n)["complete"] == n
    finally:
        if old is None:
            os.environ.pop("DSE_CACHE_DIR", None)
        else:
            os.environ["DSE_CACHE_DIR"] = old
    return first, second


# == unwritable outputs ====================================================================================
def _writers(studies, out: Path) -> dict[str, tuple[list, str]]:
    """Command -> (arguments writing at ``out`` (a name without a suffix), the option named)."""
    s1, s2 = studies
    knee = s1.parent / "knee.toml"
    return {
        "init": (["init", out.with_suffix(".toml")], "FILE"),
        "report": (["report", s1, "--out", out.with_suffix(".html")], "--out"),
        "plot": (["plot", s1, "--out", out], "--out"),
        "export": (["export", s1, "--knee", "--out", out.with_suffix(".json")], "--out"),
        "export-pareto": (["export", s1, "--pareto", "--out", out], "--out"),
        "compare": (["compare", s1, s2, "--plot", out.with_suffix(".png")], "--plot"),
        "sweep": (["sweep", knee, "--knob", "hardware.rows=8,16", "-q", "--plot", out.with_suffix(".svg")],
                  "--plot"),
        "pipeline": (["pipeline", "--tf", "1", "--tb", "1", "--tw", "1", "--trace", out.with_suffix(".json")],
                     "--trace"),
    }


WRITERS = ["init", "report", "plot", "export", "export-pareto", "compare", "sweep", "pipeline"]


@pytest.fixture(scope="module")
def knee(studies):
    from dse.cli import main

    with pytest.raises(SystemExit) as e, contextlib.redirect_stdout(open(os.devnull, "w")):
        main(["export", str(studies[0]), "--knee", "--out", str(studies[0].parent / "knee.toml")])
    assert e.value.code == 0
    return studies[0].parent / "knee.toml"


@pytest.mark.parametrize("cmd", WRITERS)
def test_an_output_under_a_regular_file_is_one_line_naming_the_option(cli, studies, knee, tmp_path, cmd):
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me")
    args, option = _writers(studies, blocker / "out")[cmd]
    before = _listing(tmp_path)
    _refused(cli(*args), option, str(blocker), "is a file, where a folder goes")
    assert _listing(tmp_path) == before


@pytest.mark.parametrize("cmd", WRITERS)
def test_an_output_on_a_read_only_file_system_is_one_line_naming_the_option(cli, studies, knee, tmp_path, cmd):
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "there.txt").write_text("keep me")
    args, option = _writers(studies, ro / "sub" / "out")[cmd]
    with read_only(ro) as why:
        _refused(cli(*args), option, str(ro / "sub"), why)
    assert _listing(ro) == {"there.txt": b"keep me"}


@pytest.mark.parametrize("cmd", ["init", "report", "export", "compare", "sweep", "pipeline"])
def test_a_folder_where_a_file_goes_is_one_line_and_stays_as_it_was(cli, studies, knee, tmp_path, cmd):
    args, option = _writers(studies, tmp_path / "out")[cmd]
    target = Path(args[args.index(option) + 1]) if option != "FILE" else Path(args[-1])
    target.mkdir()
    (target / "inside.txt").write_text("keep me")
    before = _listing(tmp_path)
    _refused(cli(*args), option, str(target), "is a folder, where a file goes")
    assert _listing(tmp_path) == before


def test_a_report_into_a_folder_says_what_is_wrong(cli, studies, tmp_path):
    """The message read "no suffix names no format it can write"."""
    folder = tmp_path / "reports"
    folder.mkdir()
    line = _refused(cli("report", studies[0], "--out", folder), "--out", "a name without a suffix (a folder?)",
                    ".html")
    assert "no suffix names" not in line


@pytest.mark.parametrize("cmd", ["plot", "export-pareto"])
def test_a_file_where_a_folder_goes_is_one_line_and_kept(cli, studies, knee, tmp_path, cmd):
    args, option = _writers(studies, tmp_path / "out")[cmd]
    (tmp_path / "out").write_text("keep me")
    _refused(cli(*args), option, str(tmp_path / "out"), "is a file, where a folder goes")
    assert _listing(tmp_path) == {"out": b"keep me"}


@pytest.mark.parametrize("cmd", ["compare", "sweep"])
def test_a_plot_format_matplotlib_cannot_write_is_refused_before_any_work(cli, studies, knee, tmp_path, cmd):
    args, option = _writers(studies, tmp_path / "out")[cmd]
    args = [*args[:-1], tmp_path / "fig.txt"]  # the output is the last argument
    _refused(cli(*args), option, "fig.txt", "'.txt'", ".png", ".svg", ".pdf")
    assert _listing(tmp_path) == {}


def test_compare_plot_without_a_suffix_prints_the_file_it_wrote(cli, studies, tmp_path):
    r = cli("compare", *studies, "--plot", tmp_path / "fronts")
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("figure: ")]
    assert line == [f"figure: {tmp_path / 'fronts.png'}"]
    assert _listing(tmp_path).keys() == {"fronts.png"}  # that file, no temporary beside it
    assert (tmp_path / "fronts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_replaces_an_existing_report_and_leaves_no_temporary(cli, studies, tmp_path):
    out = tmp_path / "r.html"
    out.write_text("old report")
    r = cli("report", studies[0], "--out", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(out) and out.read_text().startswith("<!DOCTYPE html>")
    assert _listing(tmp_path).keys() == {"r.html"}
    assert (out.stat().st_mode & 0o777) == 0o666 & ~_umask()  # as a plain write would have made it


def _umask() -> int:
    m = os.umask(0o022)
    os.umask(m)
    return m


def test_plot_figures_replace_their_namesakes_and_keep_other_files(cli, studies, tmp_path):
    out = tmp_path / "plots"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    (out / "objectives.png").write_text("an old figure")
    r = cli("plot", studies[0], "--out", out)
    assert r.returncode == 0, r.stderr
    printed = r.stdout.split()
    assert printed and all(Path(p).parent == out and Path(p).is_file() for p in printed)
    assert (out / "mine.txt").read_text() == "keep me"
    assert (out / "objectives.png").read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_init_never_removes_the_file_it_would_replace(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / 'my"study.toml'
    bad.write_text("keep me")
    _refused(cli("init", "--force", bad.name), "FILE", "'my\"study'", "not a name")
    assert bad.read_text() == "keep me"
    good = tmp_path / "mine.toml"
    good.write_text("keep me")
    _refused(cli("init", good.name), "FILE", "exists", "--force")
    assert good.read_text() == "keep me"
    r = cli("init", "--force", good.name)  # replaced only by a whole, valid study file
    assert r.returncode == 0, r.stderr
    from dse.search.studyfile import load_study

    assert load_study(good).name == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.toml", 'my"study.toml']


# == huge and non-finite numbers ===========================================================================
@pytest.mark.parametrize("option", ["--stages", "--chunks", "--width", "--microbatches", "--replicas"])
def test_pipeline_huge_integers_name_their_option(cli, option):
    _refused(cli("pipeline", "--tf", "1", "--tb", "1", "--tw", "1", option, HUGE), option, "at most")


@pytest.mark.parametrize("option", ["--tf", "--tb", "--tw", "--comm", "--tp"])
def test_pipeline_huge_times_name_their_option(cli, option):
    args = {"--tf": "1", "--tb": "1", "--tw": "1", option: "1e308"}
    _refused(cli("pipeline", *[x for kv in args.items() for x in kv]), option, "out of range")


def test_pipeline_largest_times_give_standard_json_and_trace(cli, tmp_path):
    trace = tmp_path / "t.json"
    r = cli("pipeline", "--tf", "1e15", "--tb", "1e15", "--tw", "1e15", "--comm", "1e15", "--tp", "1e15",
            "--microbatches", "64", "--gp-fraction", "0.5", "--json", "--trace", trace)
    assert r.returncode == 0, r.stderr
    d = _strict_json(r.stdout)
    assert np.isfinite(d["period"]) and np.isfinite(d["bp_step"]["makespan"]) and d["period"] > 1e15
    assert _strict_json(trace.read_text())
    r = cli("pipeline", "--tf", "1e15", "--tb", "1e15", "--tw", "1e15", "--microbatches", "64")
    assert r.returncode == 0 and "dev 0 |" in r.stdout, r.stderr  # the chart draws


def test_standard_json_writes_non_finite_numbers_as_null():
    from dse.config.values import json_text

    assert json.loads(json_text({"a": float("nan"), "b": [float("inf"), 1.5], "c": np.float64("-inf")})) == \
        {"a": None, "b": [None, 1.5], "c": None}


def test_layer_pad_that_makes_the_output_too_large_blames_pad(cli):
    _refused(cli("layer", "--conv", "8", "8", "3", "8", "3", "3", "--pad", "1048576"), "--pad", "1,048,576")
    _refused(cli("layer", "--conv", "8", "8", "3", "8", "3", "3", "--pad", HUGE), "--pad", "at most")
    _refused(cli("layer", "--conv", "1048576", "1048576", "3", "8", "3", "3", "--pad", "1"), "--conv")


def test_models_dataset_names_the_data_sets_there_are(cli):
    from models.nets.registry import DATASETS

    line = _refused(cli("models", "--dataset", "mnist"), "--dataset", "'mnist'")
    assert all(d in line for d in DATASETS)
    line = _refused(cli("pipeline", "--model", "resnet18", "--dataset", "mnist"), "--dataset", "'mnist'")
    assert "--model" not in line


def test_models_dataset_names_the_models_it_leaves_out(cli):
    """`dse models --dataset cifar10` listed 12 of the 16 models and said nothing of the other four."""
    from models import zoo

    r = cli("models", "--dataset", "cifar10", "--json")
    assert r.returncode == 0, r.stderr
    listed = {m["name"] for m in json.loads(r.stdout)}
    left = [n for n in zoo.names() if n not in listed]
    assert left and "cifar10" not in zoo.entry(left[0]).datasets
    assert r.stderr.startswith("note: not listed") and all(n in r.stderr for n in left)
    assert cli("models").stderr == ""


def _topology(folder: Path, cell: str = "100000000000000000000") -> Path:
    p = folder / "big.csv"
    p.write_text("Layer name,IFMAP Height,IFMAP Width,Filter Height,Filter Width,Channels,Num Filter,Strides,\n"
                 f"c1,{cell},8,3,3,3,8,1,\n")
    return p


def test_a_huge_scalesim_cell_is_refused_in_models_and_in_a_study_leaving_nothing(cli, tmp_path):
    topo = _topology(tmp_path)
    _refused(cli("models", "--topology", topo, "--ops"), "big.csv", "layer c1", "at most")
    _refused(cli("models", "--topology", topo), "big.csv", "layer c1")
    f = write_study(tmp_path, edit('models = ["resnet18"]', 'models = ["big.csv"]'), name="s.toml")
    before = _listing(tmp_path)
    _refused(cli("run", f, "-q", "--trials", "2"), "workload", "big.csv", "layer c1")
    assert _listing(tmp_path) == before  # no study database


def _onnx(path: Path, in_shape: list[int]) -> Path:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="c", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["y"], ["z"], name="r")]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(np.zeros((8, 3, 3, 3), np.float32), "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("shape, needles", [([1, 3, 10**9, 10**9], ("layer c", "at most")),
                                            ([1, 3, 8, 0], ("'x'", "at least 1"))], ids=["huge", "zero-width"])
def test_onnx_inputs_too_large_or_empty_are_one_line(cli, tmp_path, shape, needles):
    m = _onnx(tmp_path / "m.onnx", shape)
    for args in (("models", "--onnx", m), ("models", "--onnx", m, "--ops")):
        _refused(cli(*args), "m.onnx", *needles)


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_an_exported_configuration_with_a_huge_integer_is_refused_by_evaluate(cli, knee, tmp_path, suffix):
    import tomllib

    doc = tomllib.loads(knee.read_text())
    doc["hardware"]["rows"] = 10**30
    p = tmp_path / f"edited{suffix}"
    if suffix == ".json":
        p.write_text(json.dumps(doc))
    else:
        from dse.results.export import to_toml

        p.write_text(to_toml(doc))
    _refused(cli("evaluate", p), "hardware.rows", "at most")


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_a_configuration_that_is_not_utf8_is_one_line(cli, tmp_path, suffix):
    p = tmp_path / f"c{suffix}"
    p.write_bytes(b"\xff\xfe[hardware]\n")
    _refused(cli("evaluate", p), str(p), "UTF-8")


def test_sweep_and_worker_and_surrogate_numbers_are_checked(cli, knee, studies):
    _refused(cli("sweep", knee, "--knob", f"hardware.rows={HUGE}", "-q"), "--knob hardware.rows", "at most")
    _refused(cli("sweep", knee, "--knob", "hardware.bandwidth_gbps=1e308", "-q"), "--knob hardware.bandwidth_gbps")
    _refused(cli("worker", studies[0], "--index", HUGE), "--index", "at most")
    _refused(cli("surrogate", "--first-seed", HUGE), "--first-seed", "at most")
    _refused(cli("surrogate", "--seeds", HUGE), "--seeds", "at most")
    _refused(cli("show", studies[0], HUGE), "TRIAL")


# == export and evaluate agree on file names ===============================================================
def test_export_writes_the_format_its_suffix_names_and_evaluate_reads_it(cli, studies, tmp_path):
    import tomllib

    s1 = studies[0]
    for suffix in (".json", ".toml"):
        out = tmp_path / f"k{suffix}"
        r = cli("export", s1, "--knee", "--out", out)
        assert r.returncode == 0 and r.stdout.strip() == str(out), r.stderr
        doc = _strict_json(out.read_text()) if suffix == ".json" else tomllib.loads(out.read_text())
        assert doc["hardware"]["rows"] >= 1
        r = cli("evaluate", out, "--json")
        assert r.returncode == 0, r.stderr
        assert _strict_json(r.stdout)["metrics"]["speedup"] == pytest.approx(doc["meta"]["metrics"]["speedup"])
    _refused(cli("export", s1, "--knee", "--out", tmp_path / "k.txt"), "--out", "k.txt", ".toml", ".json")
    _refused(cli("export", s1, "--knee", "--out", tmp_path / "k2.toml", "--format", "json"), "--format json",
             "k2.toml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.json", "k.toml"]


# == options named right ===================================================================================
def test_compare_objectives_are_checked_against_the_registry(cli, studies):
    from dse.evaluation.metrics import names

    line = _refused(cli("compare", *studies, "--objectives", "nosuch,speedup"), "--objectives", "'nosuch'")
    assert all(m in line for m in names())
    _refused(cli("compare", *studies, "--objectives", "speedup,speedup"), "--objectives", "'speedup'", "twice")
    line = _refused(cli("compare", *studies, "--objectives", "speedup"), "--objectives", "two or more", "speedup")
    assert "share" not in line  # one metric named, not fewer shared by the studies


@pytest.mark.parametrize("preset, command", [("adagp-paper.toml", "dse evaluate"),
                                             ("surrogate-default.toml", "dse surrogate")])
def test_a_preset_for_another_command_says_which_command_it_is_for(cli, preset, command):
    """`dse run` of a configuration preset named one of its tables ('study file.schedule: unknown key',
    'workload.models: required'), not that the file is meant for another command."""
    study = Path(__file__).resolve().parents[2] / "studies" / preset
    _refused(cli("run", study), "not a study", f"`{command} FILE`", "[space]", "[[objectives]]")
    _refused(cli("status", study), "not a study", f"`{command} FILE`")


# == library warnings ======================================================================================
@pytest.mark.parametrize("cmd", [["worker"], ["run", "--workers", "2", "-q"]], ids=["worker", "run-workers"])
def test_an_unusable_postgresql_storage_prints_exactly_the_one_line(studies, cmd):
    """In a fresh process: Optuna's experimental-feature warnings (shown once per process) reach no one."""
    pytest.importorskip("psycopg")
    env = {k: v for k, v in os.environ.items() if k not in ("DSE_DEBUG", "DSE_STORAGE", "PYTHONWARNINGS")}
    url = "postgresql://dse:secret@127.0.0.1:1/dse"
    r = subprocess.run([sys.executable, "-m", "dse.cli", cmd[0], str(studies[0]), *cmd[1:], "--storage", url],
                       capture_output=True, text=True, env=env, timeout=240)
    line = _refused(r, "storage", "127.0.0.1")
    assert "secret" not in line
    r = subprocess.run([sys.executable, "-m", "dse.cli", "--debug", cmd[0], str(studies[0]), *cmd[1:], "--storage",
                        url], capture_output=True, text=True, env=env, timeout=240)
    assert r.returncode == 2 and "Traceback" in r.stderr
    if cmd[0] == "worker":  # it opens the storage with a heartbeat, an experimental feature: with --debug shown
        assert "ExperimentalWarning" in r.stderr      # (dse run opens the study without one first, and stops there)


def test_no_temporary_or_probe_file_is_left_in_the_study_folder(studies):
    assert not [p.name for p in studies[0].parent.iterdir() if p.name.startswith(".")]


def test_an_empty_study_file_is_called_empty(cli, tmp_path):
    """It was told it was a file for `dse surrogate`."""
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    line = _refused(cli("run", empty), "study file", "empty", "[space]")
    assert "dse surrogate" not in line


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe")
def test_a_pipe_is_read_like_a_file_not_called_missing(cli, tmp_path):
    """bash's ``<(...)`` hands a pipe; it was refused as 'no such file'."""
    assert "no such file" not in _refused(cli("surrogate", os.devnull), "[training]")
    fifo = tmp_path / "study.json"
    os.mkfifo(fifo)
    import threading

    writer = threading.Thread(target=lambda: fifo.write_text('{"workload": {}}'), daemon=True)
    writer.start()
    line = _refused(cli("evaluate", fifo), "workload.models")
    writer.join(timeout=30)
    assert "no such file" not in line and not writer.is_alive()
    # a device is read with a limit (/dev/zero was read until memory ran out): in a process of its own with
    # 2 GiB of address space, so that a regression fails here instead of exhausting the machine
    import resource

    def capped():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    for cmd in ("evaluate", "run"):
        r = subprocess.run([sys.executable, "-m", "dse.cli", cmd, "/dev/zero"], capture_output=True, text=True,
                           preexec_fn=capped, timeout=120)
        _refused(r, "/dev/zero: more than 16 MiB")


def test_plot_and_report_name_their_option_when_the_write_fails(cli, studies, tmp_path):
    """Through the Python API's Study.plot/report, a failed write named `out` instead of --out."""
    figs = tmp_path / "figs"
    (figs / "objectives.png").mkdir(parents=True)  # a folder where a figure goes
    r = cli("plot", studies[0], "--out", figs)
    assert r.returncode == 2 and "Traceback" not in r.stderr  # (a warning line on importance may come first)
    assert r.stderr.splitlines()[-1].startswith(f"dse: error: --out {figs}: cannot be written"), r.stderr
