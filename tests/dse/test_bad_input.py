"""Bad input: exit code 2 and ONE line on stderr, ``dse: error: ...``, naming the offending field and what is
allowed, with no traceback; with ``--debug`` the traceback too. Study files, configuration files (``dse
evaluate``), options, storages (unreachable, corrupt), exports from a study with no feasible trial. Storage
passwords are never printed.

Every case runs the real command line in a subprocess on a small file written into ``tmp_path`` (the
FAST_STUDY of conftest.py, edited by one line). The ``--debug`` variant of each case runs in-process
(``dse.cli.main``), which keeps the file well under a minute: the traceback it checks is printed by the same
``main``.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import sqlite3
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from studyfiles import FAST_STUDY, edit, write_study

SECRET = "s3cret"
PG_URL = f"postgresql://dse:{SECRET}@127.0.0.1:1/dse"  # port 1: refused at once
PG_MASKED = "postgresql://dse:***@127.0.0.1:1/dse"


# -- helpers --------------------------------------------------------------------------------------------
def _env(tmp_path: Path, **extra: str) -> dict:
    env = dict(os.environ)
    env.pop("DSE_STORAGE", None)
    env.pop("DSE_DEBUG", None)
    env["DSE_CACHE_DIR"] = os.environ.get("DSE_CACHE_DIR") or str(tmp_path / "dse-cache")
    env.update(extra)
    return env


def dse(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dse.cli", *map(str, args)], capture_output=True, text=True,
                          env=_env(tmp_path, **env), cwd=tmp_path, timeout=120)


def dse_debug(*args) -> tuple[int, str]:
    """``dse --debug ARGS`` in-process: (exit code, stderr)."""
    from dse.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        with pytest.raises(SystemExit) as e:
            main(["--debug", *map(str, args)])
    return e.value.code, err.getvalue()


def usage_error(tmp_path: Path, *args, needles=(), debug: bool = True, secret: str | None = None,
                **env: str) -> str:
    """Run ``dse ARGS``: assert exit 2, one `dse: error:` line holding every needle, no traceback; and (in
    process) the traceback under --debug, followed by the same line; ``secret`` printed by neither. Returns
    the line."""
    r = dse(tmp_path, *args, **env)
    if secret is not None:
        assert secret not in r.stdout and secret not in r.stderr, r.stderr
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    line = lines[0]
    assert line.startswith("dse: error: "), line
    for n in needles:
        assert n in line, (n, line)
    if debug:
        assert not env, "the in-process --debug run cannot take a different environment"
        code, err = dse_debug(*args)
        assert code == 2, (code, err)
        assert "Traceback (most recent call last)" in err
        assert err.splitlines()[-1] == line
        if secret is not None:
            assert secret not in err, err
    return line


_HW = '[hardware]\ndataflow = "ws"'
_ROWS = "rows = [8, 16, 32]"
def _all_metrics() -> tuple[str, ...]:
    """The metric names the registry holds (a new metric joins the expected message by itself)."""
    from dse.evaluation import metrics as registry

    return tuple(registry.names())


_ALL_METRICS = _all_metrics()


def _objectives(metrics) -> str:
    head = FAST_STUDY.split("[[objectives]]")[0]
    tail = FAST_STUDY[FAST_STUDY.index("[[constraints]]"):]
    return head + "".join(f'[[objectives]]\nmetric = "{m}"\n\n' for m in metrics) + tail


# -- study files ----------------------------------------------------------------------------------------
#: id -> (study text (bytes: written as they are), needles of the message)
STUDY_CASES = {
    "not_toml": ("this is [not toml\n", ("s.toml", "not valid TOML", "line 1")),
    "not_utf8": (b"\xff\xfe[study]\n", ("s.toml", "not a UTF-8 text file", "expected TOML")),
    "unknown_top_key": ("colour = 1\n" + FAST_STUDY, (".colour", "unknown key", "allowed keys:", "objectives")),
    "unknown_study_key": (edit("seed = 3", 'seed = 3\ncolour = "red"'),
                          ("study.colour", "unknown key", "allowed keys:", "sampler", "trials")),
    "unknown_training_key": (edit('network = "mlp"', 'network = "mlp"\ncolour = 1'),
                             ("training.colour", "unknown", "allowed:", "pred_width")),
    "unknown_hardware_key": (edit(_HW, _HW + "\ncolour = 1"),
                             ("hardware.colour", "unknown", "allowed:", "bandwidth_gbps")),
    "unknown_knob": (edit(_ROWS, _ROWS + "\ncolour = [1, 2]"),
                     ("space.hardware.colour", "unknown knob", "allowed:", "rows")),
    "unknown_space_section": (edit("[space.training]", "[space.tranining]"),
                              ("space.tranining", "unknown section", "hardware, parallel, training")),
    "wrong_type_trials": (edit("trials = 12", 'trials = "ten"'),
                          ("study.trials", "expected an integer", "'ten'")),
    "wrong_type_training": (edit("epochs = 2\n\n[hardware]", 'epochs = "two"\n\n[hardware]'),
                            ("training.epochs", "an integer from 1 to 200", "'two'")),
    "wrong_type_hardware": (edit(_HW, _HW + '\nrows = "many"'), ("hardware.rows", "must be an integer", "'many'")),
    "trials_zero": (edit("trials = 12", "trials = 0"), ("study.trials", ">= 1", "0")),
    "workers_zero": (edit("trials = 12", "trials = 12\nworkers = 0"), ("study.workers", ">= 1", "0")),
    "sampler": (edit('sampler = "nsga2"', 'sampler = "annealing"'),
                ("study.sampler", "'annealing'", "nsga2", "tpe", "random", "grid")),
    "grid_over_a_continuous_range": (edit("[space.hardware]", "[space.hardware]\nifmap_kb = {low = 32.0, high = 64.0}",
                                          edit('sampler = "nsga2"', 'sampler = "grid"')),
                                     ("space.hardware.ifmap_kb", "finite knobs", "step")),
    # a float range on an integer field passed (its ends are integers) and its trials failed one by one
    "float_range_on_an_integer_field": (edit("rows = [8, 16, 32]", "rows = {low = 16.0, high = 64.0}"),
                                        ("space.hardware.rows", "the float range samples", "must be an integer")),
    "fractional_step_on_an_integer_field": (edit("rows = [8, 16, 32]", "rows = {low = 16, high = 64, step = 7.5}"),
                                            ("space.hardware.rows", "step 7.5", "does not divide", "61")),
    # a field in a knob and in a bundle: the later declaration won, the table showed the other's value
    "field_in_a_knob_and_a_bundle": (edit("rows = [8, 16, 32]", "rows = [8, 16, 32]\nunit = [{rows = 64, cols = 64}, "
                                                                "{rows = 128, cols = 128}]"),
                                     ("space.hardware.unit", "sets rows", "space.hardware.rows sets too")),
    # a choice listed twice was sampled twice as often, without a word
    "choice_listed_twice": (edit("rows = [8, 16, 32]", "rows = [8, 16, 16.0, 32]"),
                            ("space.hardware.rows", "16.0 is listed twice", "each choice once")),
    # Optuna narrowed the range without a word (with its warning and a site-packages path)
    "step_that_does_not_divide": (edit("rows = [8, 16, 32]", "rows = {low = 16, high = 64, step = 20}"),
                                  ("space.hardware.rows", "step 20", "does not divide", "give high = 56")),
    "step_beyond_the_range": (edit("rows = [8, 16, 32]", "rows = {low = 16, high = 64, step = 100}"),
                              ("space.hardware.rows", "step 100", "larger than high - low")),
    "objective_not_a_metric": (edit('metric = "speedup"', 'metric = "fastness"'),
                               ("objectives[1].metric", "'fastness'", *_ALL_METRICS)),
    "objective_direction": (edit('metric = "speedup"', 'metric = "speedup"\ndirection = "up"'),
                            ("objectives[1].direction", "'up'", "minimize, maximize")),
    "constraint_not_a_metric": (edit('metric = "area_mm2"\nmax = 4.0', 'metric = "size"\nmax = 4.0'),
                                ("constraints[0].metric", "'size'", "area_mm2")),
    "one_objective": (_objectives(["speedup"]), ("objectives", "2 to 4", "got 1", "speedup", "energy_j")),
    "five_objectives": (_objectives(["accuracy_drop", "speedup", "area_mm2", "energy_j", "power_w"]),
                        ("objectives", "2 to 4", "got 5")),
    "inverted_range": (edit(_ROWS, "rows = {low = 64, high = 8}"),
                       ("space.hardware.rows", "inverted range", "low < high")),
    "empty_range": (edit(_ROWS, "rows = {low = 8, high = 8}"),
                    ("space.hardware.rows", "empty range", "low < high", "fixed value")),
    "empty_list": (edit(_ROWS, "rows = []"), ("space.hardware.rows", "empty list", "at least one value")),
    "unknown_model": (edit('models = ["resnet18"]', 'models = ["resnet51"]'),
                      ("workload.models", "'resnet51'", "resnet50", "mobilenet_v2")),
    "zero_bandwidth": (edit(_HW, _HW + "\nbandwidth_gbps = 0"),
                       ("hardware.bandwidth_gbps", ">= 0.001", "zero bandwidth")),
    "zero_pes": (edit(_HW, _HW + "\nrows = 0"), ("hardware.rows", ">= 1", "no PEs")),
    "buffer_below_one_tile": (edit(_HW, _HW + "\nrows = 64\nifmap_kb = 0.01"),
                              ("hardware.ifmap_kb", "impossible hardware", "tile", "need ifmap_kb >= 0.25")),
    "reference_zero_pes": (edit("[reference]\nrows = 16", "[reference]\nrows = 0"),
                           ("reference.rows", ">= 1", "no PEs")),
    "knob_zero_pes": (edit(_ROWS, "rows = [0, 16]"), ("space.hardware.rows", "value 0", ">= 1", "no PEs")),
    "knob_zero_bandwidth": (edit("bandwidth_gbps = [6.4, 25.6]", "bandwidth_gbps = [0.0, 25.6]"),
                            ("space.hardware.bandwidth_gbps", "value 0.0", ">= 0.001", "zero bandwidth")),
    "knob_buffer_below_one_tile": (edit(_ROWS, _ROWS + "\nifmap_kb = [0.01, 64.0]"),
                                   ("space.hardware.ifmap_kb", "value 0.01", "impossible hardware",
                                    "need ifmap_kb >=")),
}


def test_fast_study_itself_is_valid(tmp_path):
    """The cases below fail because of their one edit, not because the base file is wrong."""
    from dse.search.studyfile import load_study

    load_study(write_study(tmp_path, FAST_STUDY))


@pytest.mark.parametrize("case", list(STUDY_CASES))
def test_bad_study_file(tmp_path, case):
    text, needles = STUDY_CASES[case]
    p = tmp_path / "s.toml"
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        write_study(tmp_path, text)
    usage_error(tmp_path, "run", "-q", p, needles=needles)
    assert not list(tmp_path.glob("*.db")), "a bad study file must not create a storage"


def test_a_space_value_not_allowed_is_named_once(tmp_path):
    from dse.errors import UsageError
    from dse.search.studyfile import load_study

    p = write_study(tmp_path, edit("pred_width = [8, 32]", 'pred_width = [8, 32]\nscheme = ["adagp", "efbful"]'))
    with pytest.raises(UsageError) as e:
        load_study(p)
    assert str(e.value).startswith("space.training.scheme: value 'efbful' is not allowed: one of 'adagp'")
    assert str(e.value).count("efbful") == 1  # not again as "(got 'efbful')"


def test_every_study_command_rejects_a_bad_file(tmp_path):
    p = write_study(tmp_path, edit('sampler = "nsga2"', 'sampler = "annealing"'))
    for cmd in ("status", "pareto", "plot", "export"):
        usage_error(tmp_path, cmd, p, needles=("study.sampler", "nsga2"))


def test_missing_study_file_and_folder(tmp_path):
    usage_error(tmp_path, "run", "-q", tmp_path / "nope.toml", needles=("nope.toml", "no such file"))
    usage_error(tmp_path, "status", tmp_path, needles=(str(tmp_path), "folder", "TOML file"))


# -- options --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, needles", [
    (("--sampler", "nope"), ("--sampler", "'nope'", "nsga2", "grid")),
    (("--trials", "0"), ("--trials", ">= 1", "0")),
    (("--seed", "-1"), ("--seed", ">= 0", "-1")),
    (("--timeout", "-5"), ("--timeout", ">= 0", "-5")),
], ids=["sampler", "trials0", "seed", "timeout"])
def test_bad_run_option(tmp_path, args, needles):
    p = write_study(tmp_path, FAST_STUDY)
    usage_error(tmp_path, "run", "-q", *args, p, needles=needles)


@pytest.mark.parametrize("args, needles", [
    (("run", "-q", "--trials", "ten"), ("--trials", "integer")),
    (("run", "-q", "--colour", "red"), ("--colour",)),
    (("evaluate", "--seeds", "3.5"), ("--seeds", "integer")),
], ids=["not-an-integer", "unknown-option", "evaluate-not-an-integer"])
def test_malformed_command_line_is_one_line(tmp_path, args, needles):
    p = write_study(tmp_path, FAST_STUDY)
    usage_error(tmp_path, *args, p, needles=needles)


def test_bad_export_format(tmp_path):
    p = write_study(tmp_path, FAST_STUDY)
    usage_error(tmp_path, "export", "--format", "yaml", p, needles=("--format", "'yaml'", "toml, json, csv"))


# -- configuration files (dse evaluate) -----------------------------------------------------------------
def _config() -> dict:
    """A configuration file's tables, from FAST_STUDY's (what `dse export` would write, minus [meta])."""
    doc = tomllib.loads(FAST_STUDY)
    cfg = {k: doc[k] for k in ("workload", "training", "hardware", "reference")}
    cfg["seeds"] = 1
    cfg["schedule"] = {"gp_fraction": 0.3}  # a what-if GP fraction: no surrogate to train
    return cfg


def _set(section: str, **kv):
    def f(cfg):
        cfg.setdefault(section, {}).update(kv)
    return f


#: id -> (change to the configuration, needles)
CONFIG_CASES = {
    "unknown_top_key": (lambda c: c.update(colour=1), ("colour", "unknown key", "hardware", "training")),
    "unknown_hardware_key": (_set("hardware", colour=1),
                             ("hardware.colour", "unknown hardware field", "allowed:", "rows", "ifmap_kb")),
    "unknown_training_key": (_set("training", colour=1), ("training.colour", "unknown field", "allowed:")),
    "wrong_type_training": (_set("training", epochs="two"),
                            ("training.epochs", "an integer from 1 to 200", "'two'")),
    "wrong_choice_training": (_set("training", network=3), ("training.network", "'mlp'", "got 3")),
    "wrong_type_hardware": (_set("hardware", clock_ghz="fast"), ("hardware.clock_ghz", "must be a number")),
    "zero_pes": (_set("hardware", rows=0), ("hardware.rows", ">= 1", "no PEs")),
    "zero_bandwidth": (_set("hardware", bandwidth_gbps=0.0), ("hardware.bandwidth_gbps", ">= 0.001", "zero bandwidth")),
    "buffer_below_one_tile": (_set("hardware", rows=64, ifmap_kb=0.01),
                              ("hardware.ifmap_kb", "impossible hardware", "need ifmap_kb >= 0.25")),
    "reference_zero_pes": (_set("reference", cols=0), ("reference.cols", ">= 1", "no PEs")),
    "unknown_model": (_set("workload", models=["resnet51"]), ("workload.models", "'resnet51'", "resnet50")),
    "gp_fraction_above_1": (_set("schedule", gp_fraction=1.5), ("schedule.gp_fraction", "<= 1", "1.5")),
    "seeds_zero": (lambda c: c.update(seeds=0), ("seeds", ">= 1")),
    # a model named twice was costed twice (its energy counted twice, its speed-up weighted twice)
    "model_named_twice": (_set("workload", models=["resnet18", "resnet18"]),
                          ("workload.models", "'resnet18'", "named twice")),
    # an impossible pipeline was an internal error (exit 1), not a one-line refusal
    "more_stages_than_layers": (lambda c: c.update(parallel={"stages": 1000, "microbatches": 4}),
                                ("parallel.stages", "1000 stages", "weight layers", "resnet18 has 21")),
}


def _write_config(tmp_path: Path, cfg: dict, name: str = "c.toml") -> Path:
    from dse.results.export import to_toml

    p = tmp_path / name
    p.write_text(to_toml(cfg) + "\n")
    return p


def test_base_configuration_evaluates(tmp_path):
    r = dse(tmp_path, "evaluate", _write_config(tmp_path, _config()))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_bad_configuration_file(tmp_path, case):
    change, needles = CONFIG_CASES[case]
    cfg = _config()
    change(cfg)
    usage_error(tmp_path, "evaluate", _write_config(tmp_path, cfg), needles=needles)


def test_bad_configuration_file_format_and_options(tmp_path):
    ok = _write_config(tmp_path, _config())
    bad = tmp_path / "bad.toml"
    bad.write_text("[hardware\nrows = 8\n")
    usage_error(tmp_path, "evaluate", bad, needles=("bad.toml", "not valid TOML", "line 1"))
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{rows: 8}")
    usage_error(tmp_path, "evaluate", bad_json, needles=("bad.json", "not valid JSON"))
    usage_error(tmp_path, "evaluate", tmp_path / "none.toml", needles=("none.toml", "no such file"))
    usage_error(tmp_path, "evaluate", "--seeds", "0", ok, needles=("--seeds", "from 1 to 20", "0"))
    usage_error(tmp_path, "evaluate", "--model", "resnet51", ok, needles=("--model", "'resnet51'", "resnet50"))
    usage_error(tmp_path, "evaluate", "-m", "resnet18", "-m", "resnet18", ok,
                needles=("--model", "'resnet18'", "named twice"))


@pytest.mark.parametrize("cmd", [("evaluate",), ("sweep", "--knob", "hardware.rows=8,16")])
def test_a_study_file_given_for_a_configuration_says_so(tmp_path, cmd):
    study = write_study(tmp_path, FAST_STUDY, "s.toml")
    usage_error(tmp_path, cmd[0], study, *cmd[1:], needles=("s.toml", "this is a study file", "dse export"))


@pytest.mark.parametrize("args,needles", [
    (("--model", "resnet18", "--stages", "65"), ("--stages", "65 stages", "weight layers", "resnet18 has 21")),
    (("--model", "resnet18", "--stages", "22"), ("--stages", "22 stages", "resnet18 has 21")),
    (("--schedule", "1f1b-interleaved", "--chunks", "1", "--tf", "1", "--tb", "1", "--tw", "1"),
     ("--chunks", "at least 2", "1f1b")),
    (("--model", "resnet18", "--schedule", "1f1b-interleaved"), ("--chunks", "at least 2")),
], ids=["65-stages", "22-stages", "interleaved-explicit", "interleaved-model"])
def test_impossible_pipelines_are_one_line(tmp_path, args, needles):
    usage_error(tmp_path, "pipeline", *args, needles=needles)


@pytest.mark.parametrize("args,needles", [
    (("layer", "--gemm", "64", "64", "64", "--batch", "4"), ("--batch", "--topology only")),
    (("layer", "--gemm", "64", "64", "64", "--stride", "2"), ("--stride", "--conv only")),
    (("layer", "--gemm", "64", "64", "64", "--pad", "1"), ("--pad", "--conv only")),
    (("models", "resnet18", "--batch", "4"), ("--batch", "--ops only")),
    (("models", "resnet18", "--optimizer", "adam"), ("--optimizer", "--ops only")),
], ids=["layer-gemm-batch", "layer-gemm-stride", "layer-gemm-pad", "models-batch", "models-optimizer"])
def test_an_option_the_command_would_ignore_is_refused(tmp_path, args, needles):
    """They were accepted and the output was byte for byte the same as without them."""
    usage_error(tmp_path, *args, needles=needles)


def test_options_that_apply_still_run(tmp_path):
    for args in (("layer", "--conv", "8", "8", "3", "4", "3", "3", "--stride", "2", "--pad", "1"),
                 ("models", "resnet18", "--ops", "--batch", "4", "--optimizer", "adam")):
        r = dse(tmp_path, *args)
        assert r.returncode == 0, (args, r.stderr)


def test_pipeline_at_the_weight_layer_count_and_all_schedules_still_run(tmp_path):
    r = dse(tmp_path, "pipeline", "--model", "resnet18", "--stages", "21", "--width", "0")
    assert r.returncode == 0, r.stderr
    r = dse(tmp_path, "pipeline", "--schedule", "all", "--tf", "1", "--tb", "1", "--tw", "1", "--width", "0")
    assert r.returncode == 0 and "1f1b-interleaved" not in r.stdout and "zb-h2" in r.stdout, r.stderr
    # and says what it left out, and why (it said nothing)
    assert r.stderr.strip() == ("note: --schedule all: 1f1b-interleaved left out (for several model chunks per "
                                "device: --chunks 2 or more)")
    r = dse(tmp_path, "pipeline", "--schedule", "all", "--chunks", "2", "--tf", "1", "--tb", "1", "--tw", "1")
    assert r.returncode == 0 and "1f1b-interleaved" in r.stdout, r.stderr
    assert "gpipe" in r.stderr and "left out (for one model chunk per device: --chunks 1)" in r.stderr


# -- storages -------------------------------------------------------------------------------------------
def _no_secret(r: subprocess.CompletedProcess, secret: str = SECRET) -> None:
    assert secret not in r.stdout and secret not in r.stderr, r.stderr


@pytest.mark.parametrize("cmd", [("status",), ("run", "-q"), ("run",), ("export",)],
                         ids=["status", "run-q", "run-with-bar", "export"])
def test_unreachable_postgres_is_one_line_and_masks_the_password(tmp_path, cmd):
    """Whatever the drivers installed (none, psycopg2, psycopg 3), the URL is shown with *** for the password,
    also in --debug's traceback."""
    p = write_study(tmp_path, FAST_STUDY)
    line = usage_error(tmp_path, *cmd, "--storage", PG_URL, p, secret=SECRET,
                       needles=(f"storage {PG_MASKED}", "cannot be used"))
    if cmd == ("status",):  # the same through the environment variable
        e = dse(tmp_path, *cmd, p, DSE_STORAGE=PG_URL)
        assert e.returncode == 2 and e.stderr.strip() == line
        _no_secret(e)


def _block_postgres_drivers(tmp_path: Path) -> str:
    """A folder for PYTHONPATH in which `import psycopg2` and `import psycopg` fail as if not installed."""
    shim = tmp_path / "no-drivers"
    for mod in ("psycopg2", "psycopg"):
        (shim / mod).mkdir(parents=True)
        (shim / mod / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named '{mod}'\", "
                                                f"name={mod!r})\n")
    return str(shim)


def test_missing_postgres_driver_is_named(tmp_path):
    """Without the driver (blocked here whatever is installed) the message says which extra to install."""
    p = write_study(tmp_path, FAST_STUDY)
    shim = _block_postgres_drivers(tmp_path)
    usage_error(tmp_path, "status", "--storage", PG_URL, p, PYTHONPATH=shim, debug=False, secret=SECRET,
                needles=(PG_MASKED, "driver", "pip install 'dse[postgres]'"))
    # a URL naming another driver: that driver's package (the extra installs psycopg 3, which would not help)
    url = PG_URL.replace("postgresql://", "postgresql+psycopg2://")
    usage_error(tmp_path, "status", "--storage", url, p, PYTHONPATH=shim, debug=False, secret=SECRET,
                needles=("driver psycopg2 is not installed", "pip install psycopg2-binary"))


def _postgres_driver_installed() -> bool:
    """Whether SQLAlchemy's driver for a plain postgresql:// URL imports (psycopg 3 since SQLAlchemy 2.1)."""
    try:
        from sqlalchemy.engine import make_url

        make_url(PG_URL).get_dialect().import_dbapi()
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _postgres_driver_installed(), reason="needs the PostgreSQL driver: dse[postgres]")
def test_refused_postgres_says_so_with_the_driver_installed(tmp_path):
    p = write_study(tmp_path, FAST_STUDY)
    line = usage_error(tmp_path, "status", "--storage", PG_URL, p, secret=SECRET, needles=("127.0.0.1", "refused"))
    assert "install" not in line


@pytest.mark.parametrize("password", [
    "s3cret",
    "s3/cr:et",
])
def test_password_never_printed_whatever_its_characters(tmp_path, password):
    p = write_study(tmp_path, FAST_STUDY)
    r = dse(tmp_path, "status", "--storage", f"postgresql://dse:{password}@127.0.0.1:1/dse", p)
    assert r.returncode == 2
    _no_secret(r, password)


@pytest.mark.parametrize("url", [
    "postgresql://dse:s3cret@db.example/dse",
    "postgresql+psycopg2://dse:s3cret@db.example:5432/dse",
    "mysql+pymysql://dse:s3cret@db.example/dse?charset=utf8mb4",
    "postgresql://dse:s3/cret@db.example/dse",
    "postgresql://:s3cret@db.example/dse",
    "postgresql://db.example/dse?user=dse&password=s3cret",
])
def test_mask_url(url):
    from dse.search.study import mask_url

    masked = mask_url(url)
    assert "s3cret" not in masked and "s3/cret" not in masked and "db.example" in masked


def test_storage_that_is_not_a_url_or_cannot_be_opened(tmp_path):
    p = write_study(tmp_path, FAST_STUDY)
    usage_error(tmp_path, "status", "--storage", "redis://dse:s3cret@h/0", p,
                needles=("--storage", "not a storage URL", "sqlite:///", "postgresql://", "journal:///"))
    for url in ("sqlite:///", "sqlite://", "sqlite:///:memory:"):  # no file: a study that would not be kept
        usage_error(tmp_path, "run", "-q", "--storage", url, p, needles=("--storage", url, "names no file",
                                                                        "sqlite:///FILE.db"))
    usage_error(tmp_path, "run", "-q", "--storage", f"sqlite:///{tmp_path}/no/such/folder/x.db", p,
                needles=("no/such/folder/x.db", "cannot be used", "unable to open database file"))


def _corrupt(path: Path, kind: str) -> None:
    if kind == "random":
        path.write_bytes(random.Random(0).randbytes(8192))
    elif kind == "text":
        path.write_text("this is not a database\n" * 200)
    else:  # a real SQLite file whose pages were overwritten
        con = sqlite3.connect(path)
        con.execute("create table t (x)")
        con.executemany("insert into t values (?)", [(i,) for i in range(5000)])
        con.commit()
        con.close()
        data = bytearray(path.read_bytes())
        data[100:4096] = random.Random(1).randbytes(3996)
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", ["random", "text", "malformed"])
def test_corrupt_sqlite_file(tmp_path, kind):
    p = write_study(tmp_path, FAST_STUDY)
    db = tmp_path / "tiny.db"  # the default storage: <[study] name>.db beside the study file
    _corrupt(db, kind)
    before = db.read_bytes()
    for cmd in (("status",), ("run",)):
        usage_error(tmp_path, *cmd, p,
                    needles=("storage sqlite:///", "tiny.db", "cannot be used", "corrupt", "move it away"))
    assert db.read_bytes() == before, "a corrupt storage must be left as it is"


# -- exports --------------------------------------------------------------------------------------------
def test_export_from_a_study_not_run(tmp_path):
    p = write_study(tmp_path, FAST_STUDY)
    usage_error(tmp_path, "export", p, needles=("'tiny'", "tiny.db", "dse run"))


def test_export_with_no_feasible_trial(tmp_path):
    text = edit("trials = 12", "trials = 3", edit("max = 4.0", "max = 0.001"))
    p = write_study(tmp_path, text)
    r = dse(tmp_path, "run", "-q", p)
    assert r.returncode == 0, r.stderr  # an impossible constraint is a valid study: its trials are infeasible
    needles = ("export:", "'tiny'", "no feasible trial", "area_mm2 <= 0.001", "relax [[constraints]]")
    line = usage_error(tmp_path, "export", p, needles=needles)
    for sel in (("--pareto", "--format", "json"), ("--best", "speedup")):
        assert usage_error(tmp_path, "export", *sel, p) == line


def test_a_knob_is_finite_exactly_when_it_has_a_grid():
    """One rule decides finiteness (``Knob.finite``): the grid sampler's check, the hybrid's grid walk and its
    whole-hardware-grid test all read it, and ``values()`` agrees with it."""
    from dse.config.space import parse_knob
    from dse.errors import UsageError

    cases = {"list": ([16, 32], True), "fixed": (8, True), "int": ({"low": 1, "high": 4}, True),
             "stepped": ({"low": 0.1, "high": 0.3, "step": 0.1}, True),
             "int_log": ({"low": 8, "high": 64, "log": True}, False), "real": ({"low": 0.5, "high": 1.5}, False),
             "bundle": ([{"a": 1, "b": 2}, {"a": 3, "b": 4}], True)}
    for name, (spec, finite) in cases.items():
        k = parse_knob(f"space.training.{name}", spec)
        assert k.finite is finite, name
        if finite:
            assert len(k.values()) >= 1
        else:
            with pytest.raises(UsageError):
                k.values()


def test_a_step_is_checked_on_its_decimals_as_optuna_checks_it():
    """A float tolerance refused ranges Optuna accepts ("would end at 100.1, not 100.1")."""
    from dse.config.space import parse_knob
    from dse.errors import UsageError

    assert parse_knob("x", {"low": 100.0, "high": 100.1, "step": 1e-6}).step == 1e-6
    assert parse_knob("x", {"low": 0.05, "high": 0.3, "step": 0.05}).high == 0.3
    with pytest.raises(UsageError, match=r"would end at 999999\.9, not 1000000: give high = 999999\.9"):
        parse_knob("x", {"low": 0, "high": 1000000, "step": 0.3})
