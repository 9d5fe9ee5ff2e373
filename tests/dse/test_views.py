"""What a researcher looks at: `dse show`, `dse init`, export of a whole front, help texts (a small study)."""

from __future__ import annotations

import csv
import io
import json
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


def test_show_layers_sum_to_the_schedules_step_without_stash(run, small):
    """Per-op times add up to the plain-BP step's forward + backward + update from accel.schedule."""
    from accel.schedule import step_costs
    from dse.evaluate import Configuration
    from dse.views import layer_table

    best = _front(run, small)[0]
    d = json.loads(run("show", str(small), str(best["trial"]), "--format", "json").stdout)
    cfg = Configuration.from_dict(d["config"])
    rows = layer_table(cfg, "resnet18")
    from models import zoo

    ops = zoo.build("resnet18", dataset="cifar10").training_ops(64)
    bp = step_costs(ops, hw=cfg.hardware).bp
    parts = bp.parts_s["forward"] + bp.parts_s["backward"] + bp.parts_s["update"]
    assert sum(r["time_us"] for r in rows) * 1e-6 == pytest.approx(float(parts), rel=1e-9)
    assert len(rows) == len(ops)


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
    assert sum(int(r["macs"]) for r in rows if r["phase"] == "fwd") == 64 * zoo.build("resnet18", dataset="cifar10").macs
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
    p = subprocess.Popen([sys.executable, "-m", "dse.cli", "export", str(small), "--pareto", "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()
    assert p.wait() == 0 and p.stderr.read() == b""
    files = sorted(out.glob("*.toml"))
    assert len(files) == n and all(f.read_text().strip() for f in files)
    assert not [x for x in tmp_path.iterdir() if x.name.startswith(".front")]  # no temporary left


@pytest.mark.parametrize("template", ["quickstart", "zoo"])
def test_init_writes_a_valid_commented_study_named_after_the_file(run, tmp_path, template):
    from dse.studyfile import load_study

    f = tmp_path / "mine.toml"
    r = run("init", "--template", template, str(f))
    assert r.returncode == 0, r.stderr
    text = f.read_text()
    assert text.startswith("#") and "dse run mine.toml" in text
    spec = load_study(f)
    assert spec.name == "mine"
    preset = load_study(Path(__file__).resolve().parents[2] / "studies" / f"{template}.toml")
    assert spec.space == preset.space and spec.objectives == preset.objectives
    r = run("init", str(f))
    assert r.returncode == 2 and "exists" in r.stderr
    r = run("init", "--template", "nope", str(tmp_path / "x.toml"))
    assert r.returncode == 2 and "--template" in r.stderr


def test_help_keeps_placeholders_and_shows_flags_without_a_type(run):
    r = run("run", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "a SQLite file <name>.db beside" in text and "<name>.journal" in text
    assert "<bool>" not in r.stdout
    r = run("export", "--help")
    assert "<bool>" not in r.stdout and "--pareto" in r.stdout
