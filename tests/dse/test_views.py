"""What a researcher looks at: `dse show`, `dse init`, export of a whole front, help texts (a small study)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture
def run(cli):
    return cli


@pytest.fixture
def small(ran_study) -> Path:
    return ran_study


def _front(run, small) -> list[dict]:
    r = run("pareto", str(small), "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_show_json_has_config_metrics_models_and_layers(run, small):
    best = _front(run, small)[0]
    r = run("show", str(small), str(best["trial"]), "--layers", "--format", "json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["state"] == "complete" and d["feasible"] is True
    for m in ("accuracy_drop", "speedup", "area_mm2"):
        assert d["metrics"][m] == pytest.approx(best[m])
    assert d["config"]["hardware"]["rows"] == best["hardware.rows"]
    (model,) = d["models"]
    assert model["model"] == "resnet18" and model["speedup"] == pytest.approx(best["speedup"])
    layers = d["layers"]["resnet18"]
    assert {r["phase"] for r in layers} == {"fwd", "fwd_vec", "igrad", "wgrad", "bwd_vec", "update"}
    gemms = [r for r in layers if r["phase"] in ("fwd", "igrad", "wgrad")]
    assert all(0 < r["utilization"] <= 1 and r["cycles"] >= r["compute_cycles"] for r in gemms)
    assert all(r["utilization"] is None for r in layers if r["phase"] not in ("fwd", "igrad", "wgrad"))


def test_show_layers_are_the_accelerator_models_op_costs(run, small):
    """Per-op rows are accel.gemm's costs of the zoo model's training ops on the trial's accelerator."""
    from accel import gemm_cost
    from dse.config.configuration import Configuration
    from dse.results.views import layer_table
    from models import zoo

    best = _front(run, small)[0]
    d = json.loads(run("show", str(small), str(best["trial"]), "--format", "json").stdout)
    cfg = Configuration.from_dict(d["config"])
    rows = layer_table(cfg, "resnet18")
    ops = zoo.build("resnet18", dataset="cifar10").training_ops(64)
    assert len(rows) == len(ops)
    g = [i for i, r in enumerate(rows) if r["phase"] in ("fwd", "igrad", "wgrad")]
    c = gemm_cost(ops.M[g], ops.K[g], ops.N[g], ops.repeat[g], hw=cfg.hardware, include_leakage=False)
    assert [rows[i]["compute_cycles"] for i in g] == [float(x) for x in c.compute_cycles]
    assert sum(rows[i]["macs"] for i in g) == int(ops.macs[g].sum())


def test_show_layers_add_up_to_no_more_than_the_step_they_break_down(run, small):
    """Each op costed alone, as the step's schedule costs it (a convolution fetching its raw input): their sum
    is at most the plain-BP step on the trial's accelerator, which adds activation-stash stalls (the ops were
    costed without im2col: 50% more time and 79% more DRAM traffic than the step)."""
    from dataclasses import replace

    from dse.config.configuration import Configuration
    from dse.evaluation.evaluator import evaluate_hardware

    t = _front(run, small)[0]["trial"]
    d = json.loads(run("show", str(small), str(t), "--layers", "--format", "json").stdout)
    (model,) = d["models"]
    ops = d["layers"]["resnet18"]
    cfg = Configuration.from_dict(d["config"])
    (bp,) = evaluate_hardware(replace(cfg, training=cfg.training.replace(scheme="bp")), 0.0)["models"]
    assert bp["step_ms_scheme_bp"] == pytest.approx(model["step_ms_bp"], rel=1e-12)  # the same plain-BP step
    assert 0 < sum(r["time_us"] for r in ops) / 1e3 <= model["step_ms_bp"] * (1 + 1e-9)
    assert 0 < sum(r["dram_bytes"] for r in ops) / 1e9 <= bp["dram_gb_per_step_scheme_bp"] * (1 + 1e-9)


def test_show_csv_tables_parse(run, small):
    t = _front(run, small)[0]["trial"]
    from models import zoo

    r = run("show", str(small), str(t), "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 1 and rows[0]["model"] == "resnet18" and float(rows[0]["step_ms_gp"]) > 0
    r = run("show", str(small), str(t), "--layers", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert rows[0]["name"] == "conv1" and {r["model"] for r in rows} == {"resnet18"}
    fwd_macs = sum(int(r["macs"]) for r in rows if r["phase"] == "fwd")
    assert fwd_macs == 64 * zoo.build("resnet18", dataset="cifar10").macs
    r = run("show", str(small), str(t))
    assert r.returncode == 0 and "proxy task digits" in r.stdout and "objective (minimize)" in r.stdout


def test_show_bad_trial_and_model_are_one_line_errors(run, small):
    r = run("show", str(small), "99")
    assert r.returncode == 2 and "trial 99" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run("show", str(small), "0", "--model", "vgg16")
    assert r.returncode == 2 and "vgg16" in r.stderr


def test_export_pareto_folder_is_complete_even_when_the_reader_goes_away(run, small, tmp_path):
    n = len(_front(run, small))
    out = tmp_path / "front"
    with subprocess.Popen([sys.executable, "-m", "dse.cli", "export", str(small), "--pareto", "--out", str(out)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
        p.stdout.readline()
        p.stdout.close()
        assert p.wait() == 0 and p.stderr.read() == b""
    files = sorted(out.glob("*.toml"))
    assert len(files) == n and all(f.read_text().strip() for f in files)
    assert not [x for x in tmp_path.iterdir() if x.name.startswith(".front")]  # no temporary left


@pytest.mark.parametrize("template", ["quickstart", "zoo", "predictors"])
def test_init_writes_a_valid_commented_study_named_after_the_file(run, tmp_path, template):
    from dse.search.studyfile import load_study

    f = tmp_path / "sub" / "mine.toml"
    r = run("init", "--template", template, str(f))
    assert r.returncode == 0, r.stderr
    text = f.read_text()
    assert text.startswith("#") and f"dse run {f}`" in text and f"dse report {f}`" in text  # the path as given
    spec = load_study(f)
    assert spec.name == "mine"
    preset = load_study(Path(__file__).resolve().parents[2] / "studies" / f"{template}.toml")
    assert spec.space == preset.space and spec.objectives == preset.objectives
    r = run("init", str(f))
    assert r.returncode == 2 and "exists" in r.stderr
    r = run("init", "--template", "nope", str(tmp_path / "x.toml"))
    assert r.returncode == 2 and "--template" in r.stderr


def test_init_presets_are_package_data_and_the_studies_presets():
    """`dse init` failed from a wheel or sdist ("no preset found"): it read the checkout's studies/ folder,
    which an installed package lacks. Its presets are dse/presets/ (package data; links to studies/ in the
    checkout, copies in a wheel), the same files as studies/."""
    import tomllib

    from dse.cli.views import TEMPLATES, _templates

    root = Path(__file__).resolve().parents[2]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["dse"]
    for name, path in _templates().items():
        assert path.parent == root / "dse" / "presets" and any(path.relative_to(root / "dse").match(g) for g in data)
        assert path.read_bytes() == (root / "studies" / f"{name}.toml").read_bytes()
    assert sorted(_templates()) == sorted(TEMPLATES) and len(TEMPLATES) == 3


def test_help_keeps_placeholders_and_shows_flags_without_a_type(run):
    r = run("run", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "<name>.db (SQLite), or <name>.journal" in text and "a journal file <name>.journal beside" in text
    assert "<bool>" not in r.stdout
    r = run("export", "--help")
    assert "<bool>" not in r.stdout and "--pareto" in r.stdout


@pytest.fixture(scope="module")
def second_study(ran_study, tmp_path_factory) -> Path:
    """The same study under another name and sampler seed (the surrogate is cached: hardware costs only)."""
    from dse.search.runner import run_study
    from dse.search.studyfile import load_study

    p = tmp_path_factory.mktemp("second") / "other.toml"
    p.write_text(ran_study.read_text().replace('name = "tiny"', 'name = "other"').replace("seed = 3", "seed = 11"))
    old = os.environ.get("DSE_CACHE_DIR")
    os.environ["DSE_CACHE_DIR"] = str(tmp_path_factory.getbasetemp() / "dse-cache")
    try:
        run_study(load_study(p))
    finally:
        os.environ.pop("DSE_CACHE_DIR") if old is None else os.environ.__setitem__("DSE_CACHE_DIR", old)
    return p


def _dominates(a, b, directions):
    s = [(-1 if d == "maximize" else 1) for d in directions]
    a, b = [x * k for x, k in zip(a, s)], [x * k for x, k in zip(b, s)]
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def test_compare_counts_dominance_and_hypervolume_at_a_common_reference(run, small, second_study, tmp_path):
    r = run("compare", small, second_study, "--format", "json", "--plot", tmp_path / "cmp.png")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    objs, dirs = d["objectives"], d["directions"]
    assert objs == ["accuracy_drop", "speedup", "area_mm2"] and dirs == ["minimize", "maximize", "minimize"]
    fronts = {n: [[p[m] for m in objs] for p in pts] for n, pts in d["fronts"].items()}
    # the fronts are those `dse pareto` prints
    for name, f in (("tiny", small), ("other", second_study)):
        assert sorted(p["trial"] for p in d["fronts"][name]) == sorted(p["trial"] for p in _front(run, f))
    rows = {row["study"]: row for row in d["studies"]}
    for a, b in (("tiny", "other"), ("other", "tiny")):
        want = sum(any(_dominates(q, p, dirs) for q in fronts[b]) for p in fronts[a])
        assert rows[a][f"dominated_by_{b}"] == want
    from dse.search.pareto import Point, hypervolume

    for name, f in fronts.items():
        pts = [Point(i, tuple(v), {}, {}, True, {}) for i, v in enumerate(f)]
        assert rows[name]["hypervolume"] == pytest.approx(hypervolume(pts, dirs, d["reference"]))
    assert (tmp_path / "cmp.png").stat().st_size > 10_000
    assert d["notes"] == []  # one proxy, one set of seeds
    r = run("compare", small, small, "--format", "json")
    assert r.returncode == 2 and "is given twice" in r.stderr


def test_compare_tells_two_studies_of_one_name_apart_by_their_files(run, small, tmp_path, monkeypatch):
    """A study and a copy run in another folder share their [study] name (it names the stored study, so it
    cannot be changed): compare refused them ("share a name"). Each is now named with its file."""
    import shutil

    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        for f in small.parent.glob(small.stem + ".*"):
            shutil.copy(f, tmp_path / sub / f.name)
    monkeypatch.chdir(tmp_path)
    r = run("compare", "a/tiny.toml", "b/tiny.toml", "--format", "json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    a, b = "tiny (a/tiny.toml)", "tiny (b/tiny.toml)"
    assert [row["study"] for row in d["studies"]] == [a, b] and set(d["fronts"]) == {a, b}
    rows = {row["study"]: row for row in d["studies"]}
    assert rows[a][f"dominated_by_{b}"] == 0 and rows[a]["front"] == rows[b]["front"] == len(_front(run, small))
    r = run("compare", "a/tiny.toml", small, "--format", "csv")
    assert r.returncode == 0 and f"tiny ({small})" in r.stdout  # a file outside the folder: its whole path
    r = run("compare", "a/tiny.toml", "a/../a/tiny.toml")
    assert r.returncode == 2 and "is given twice" in r.stderr
    monkeypatch.setenv("DSE_STORAGE", "postgresql://alice:s3cretpw@127.0.0.1:1/db")  # one study: its password hidden
    r = run("compare", "a/tiny.toml", "b/tiny.toml")
    assert r.returncode == 2 and "is given twice" in r.stderr and "s3cretpw" not in r.stderr, r.stderr


def test_compare_counts_a_front_point_two_studies_share_for_both(monkeypatch):
    """A study resumed from another's copy shares its first trials: their common front points were counted in
    the union front for the first study only (779 of the second's 2,239, all on the union front). And two
    studies of one name are refused before either is read (it took 10 s of reading at 10^4 trials)."""
    import dse.search.study as study_mod
    from dse.errors import UsageError
    from dse.results.compare import compare, compare_studies
    from dse.search.pareto import Point

    def pt(i, v):
        return Point(i, v, {"speedup": v[0], "energy_j": v[1]}, {}, True, {})

    shared = [pt(0, (2.0, 5.0)), pt(1, (3.0, 6.0))]
    a = shared + [pt(2, (1.0, 4.0))]
    b = shared + [pt(3, (4.0, 9.0)), pt(4, (1.5, 5.5))]  # (1.5, 5.5) is dominated by (2.0, 5.0)
    rows = {r["study"]: r for r in compare([("a", None, a, [0.0, 10.0]), ("b", None, b, [0.0, 10.0])],
                                           ["speedup", "energy_j"], ["maximize", "minimize"])["studies"]}
    assert rows["a"]["in_union_front"] == 3 and rows["b"]["in_union_front"] == 3  # the shared two for both
    assert rows["a"]["front"] == 3 and rows["b"]["front"] == 3

    class Spec:
        name, metrics, path = "same", ["speedup", "energy_j"], None

    monkeypatch.setattr(study_mod, "open_study", lambda *a, **k: pytest.fail("a study was read"))
    with pytest.raises(UsageError, match="is given twice"):
        compare_studies([Spec(), Spec()])


def test_compare_says_when_accuracy_axes_come_from_different_proxies_or_seeds(tmp_path):
    """digits drops were judged against mnist1d drops with no word."""
    from dse.results.compare import accuracy_notes
    from dse.search.studyfile import load_study
    from studyfiles import edit, write_study

    for sub in "abc":
        (tmp_path / sub).mkdir()
    a = load_study(write_study(tmp_path / "a", name="a.toml"))
    b = load_study(write_study(tmp_path / "b", edit('task = "digits"', 'task = "mnist1d"'), name="b.toml"))
    c = load_study(write_study(tmp_path / "c", edit("seeds = 1", "seeds = 1\nfirst_seed = 5"), name="c.toml"))
    objs = ["accuracy_drop", "speedup"]
    assert accuracy_notes([a, a], objs) == [] and accuracy_notes([a, b], ["speedup", "energy_j"]) == []
    (note,) = accuracy_notes([a, b], objs)
    assert "different proxies" in note and "digits / mlp" in note and "mnist1d / mlp" in note
    (note,) = accuracy_notes([a, c], objs)
    assert "surrogate seeds differ" in note and "1 seeds from 0" in note and "1 seeds from 5" in note


def test_compare_on_chosen_objectives_csv(run, small, second_study):
    r = run("compare", small, second_study, "--objectives", "speedup,energy_j", "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [row["study"] for row in rows] == ["tiny", "other"]
    assert all(int(row["front"]) >= 1 and float(row["hypervolume"]) > 0 for row in rows)
    r = run("compare", small, second_study, "--objectives", "speedup,nope")
    assert r.returncode == 2 and "nope" in r.stderr


def test_sweep_varies_knobs_and_matches_evaluate(run, small, tmp_path):
    from dataclasses import replace

    from dse.config.configuration import load_configuration
    from dse.evaluation.evaluator import evaluate

    cfg_file = tmp_path / "knee.toml"
    assert run("export", small, "--knee", "--out", cfg_file).returncode == 0
    r = run("sweep", cfg_file, "--knob", "hardware.rows=8,32", "--knob", "hardware.bandwidth_gbps=6.4,25.6",
            "--format", "csv", "--plot", tmp_path / "sweep.png", "--quiet")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [(int(x["hardware.rows"]), float(x["hardware.bandwidth_gbps"])) for x in rows] == \
        [(8, 6.4), (8, 25.6), (32, 6.4), (32, 25.6)]
    base = load_configuration(cfg_file)
    for x in rows:
        hw = replace(base.hardware, rows=int(x["hardware.rows"]), bandwidth_gbps=float(x["hardware.bandwidth_gbps"]))
        m = evaluate(replace(base, hardware=hw))["metrics"]
        for k in ("speedup", "energy_j", "area_mm2", "accuracy_drop"):
            assert float(x[k]) == pytest.approx(m[k], rel=1e-12)
    assert float(rows[3]["speedup"]) > float(rows[0]["speedup"])  # a larger, better-fed array is faster
    assert (tmp_path / "sweep.png").stat().st_size > 10_000
    for bad, word in (("hardware.rowz=8,16", "rowz"), ("rows=8", "SECTION.FIELD"), ("hardware.rows=0,8", "rows")):
        r = run("sweep", cfg_file, "--knob", bad)
        assert r.returncode == 2 and word in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_pareto_columns_sort_limit_where(run, small):
    full = _front(run, small)
    r = run("pareto", small, "--columns", "speedup,area_mm2,hardware.rows", "--sort", "speedup", "--limit", "2",
            "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert list(rows[0]) == ["trial", "speedup", "area_mm2", "hardware.rows"]
    want = sorted(full, key=lambda p: (-p["speedup"], p["trial"]))[:2]
    assert [int(x["trial"]) for x in rows] == [p["trial"] for p in want]
    r = run("pareto", small, "--where", "hardware.rows>=16", "--where", "area_mm2<=3.5", "--format", "json")
    got = json.loads(r.stdout)
    assert {p["trial"] for p in got} == {p["trial"] for p in full if p["hardware.rows"] >= 16
                                         and p["area_mm2"] <= 3.5}
    for bad, word in (("--sort=nope", "--sort"), ("--columns=nope", "--columns"), ("--where=x>", "--where"),
                      ("--limit=0", "--limit")):
        r = run("pareto", small, bad)
        assert r.returncode == 2 and word in r.stderr, r.stderr


def test_pareto_table_names_units_measured_and_requested_and_the_proxy(run, small, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    r = run("pareto", small, "--limit", "1", "--columns", "all")
    header = r.stdout.splitlines()[0]
    assert "speedup [x]" in header and "area_mm2 [mm^2]" in header and "gp_fraction(measured) [0-1]" in header
    assert "training.pred_width" in header and "hardware.pred_kb [KiB]" in header
    assert "proxy task digits" in r.stderr and "requested" in r.stderr
    assert len(r.stdout.strip().splitlines()) == 3  # header, rule, one row


def test_pareto_shows_the_standard_error_with_several_seeds(run, small, tmp_path, monkeypatch):
    """A study with 2 surrogate seeds per setting: each accuracy figure is followed by its standard error over
    the seeds, and the seeds behind it are a column."""
    from dse.search.runner import run_study
    from dse.search.studyfile import load_study

    p = tmp_path / "two.toml"
    p.write_text(small.read_text().replace("seeds = 1", "seeds = 2").replace("trials = 12", "trials = 3")
                 .replace('name = "tiny"', 'name = "two"'))
    run_study(load_study(p))
    rows = json.loads(run("pareto", p, "--format", "json").stdout)
    keys = list(rows[0])
    i = keys.index("accuracy_drop")
    assert keys[i + 1] == "accuracy_drop_se" and all(r["accuracy_drop_se"] >= 0 for r in rows)
    assert all(r["seeds"] == 2 for r in rows)
    csv = run("pareto", p, "--format", "csv").stdout.splitlines()[0].split(",")
    assert "accuracy_drop_se" in csv and "seeds" in csv
    monkeypatch.setenv("COLUMNS", "160")
    r = run("pareto", p)
    head = r.stdout.splitlines()[:2]
    assert "±" in "\n".join(head) and "standard error" in r.stderr
    aware = json.loads(run("pareto", p, "--format", "json", "--noise-aware").stdout)
    assert {r["trial"] for r in aware} <= {r["trial"] for r in rows}


def test_dse_show_reads_one_trial_not_the_whole_study(ran_study):
    """`dse show TRIAL` listed every trial to find one (11 s at 10^4 trials); it reads that trial, and lists
    the study only to say which trials exist when there is no such one."""
    from dse.errors import UsageError
    from dse.results.views import find_trial
    from dse.search.study import open_study
    from dse.search.studyfile import load_study

    study = open_study(load_study(ran_study), create=False)
    listed = []
    real = study.get_trials
    study.get_trials = lambda *a, **k: listed.append(1) or real(*a, **k)
    t = find_trial(study, 3)
    assert t.number == 3 and t.params == real()[3].params and not listed
    for n in (99, -1, 10**30):  # (10**30: past SQLite's integers)
        with pytest.raises(UsageError, match=rf"the study has no trial {n} \(trials 0-11\)"):
            find_trial(study, n)


def test_show_says_a_running_or_queued_trial_has_no_result_yet(run, small, tmp_path):
    """`dse show` on a running trial printed "reason: no reason recorded", as for a trial that failed silently."""
    import shutil

    import optuna

    for f in small.parent.glob(small.stem + ".*"):
        shutil.copy(f, tmp_path / f.name)
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tmp_path / 'tiny.db'}")
    running = study.ask().number
    study.enqueue_trial({})
    queued = running + 1
    for number, want in ((running, "reason: running, no result yet"),
                         (queued, "reason: queued: no worker has started it yet")):
        r = run("show", tmp_path / "tiny.toml", number)
        assert r.returncode == 0, r.stderr
        assert want in r.stdout and "no reason recorded" not in r.stdout, r.stdout
