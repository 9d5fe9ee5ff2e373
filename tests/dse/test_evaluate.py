"""`dse evaluate`: a configuration over zoo models, what-if GP fractions, the surrogate's fraction."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest

from dse.cli import main
from dse.evaluate import evaluate, load_configuration

ROOT = Path(__file__).resolve().parents[2]


def _json(capsys, *args):
    with pytest.raises(SystemExit) as e:
        main(list(args))
    assert e.value.code == 0
    return json.loads(capsys.readouterr().out)


def test_paper_configuration_json_has_the_documented_keys(capsys):
    out = _json(capsys, "evaluate", str(ROOT / "studies/adagp-paper.toml"), "--model", "resnet18",
                "--model", "mobilenet_v2", "--json")
    assert [m["model"] for m in out["models"]] == ["resnet18", "mobilenet_v2"]
    for m in out["models"]:
        assert {"model", "speedup", "speedup_same_hw", "energy_j", "energy_saving", "step_ms_bp",
                "step_ms_adagp_bp", "step_ms_gp", "predictor_params"} <= set(m)
        assert m["speedup"] > 1 and 0 < m["energy_saving"] < 1
    s = out["summary"]
    assert {"speedup_geomean", "energy_saving_total", "area_mm2", "power_w"} <= set(s)
    assert s["speedup_geomean"] == pytest.approx(math.sqrt(out["models"][0]["speedup"]
                                                           * out["models"][1]["speedup"]))
    total = sum(m["energy_j"] for m in out["models"])
    assert s["energy_saving_total"] == pytest.approx(1 - total / sum(m["energy_j_ref"] for m in out["models"]))
    assert out["surrogate"] is None  # a what-if GP fraction needs no training


def test_paper_configuration_names_every_zoo_model():
    from models.zoo import names

    cfg = load_configuration(ROOT / "studies/adagp-paper.toml")
    assert set(cfg.workload.models) == set(names())


def test_more_gp_steps_mean_more_speed(tmp_path):
    base = load_configuration(ROOT / "studies/adagp-paper.toml")
    from dataclasses import replace

    from dse.workload import Workload

    w = Workload.from_dict({**base.workload.to_dict(), "models": ["resnet50"]})
    speeds = [evaluate(replace(base, workload=w, gp_fraction=g))["metrics"]["speedup"] for g in (0, 0.3, 0.6)]
    assert speeds[0] < 1.0 < speeds[1] < speeds[2]  # at 0 the predictor only costs


def test_without_a_what_if_the_surrogate_sets_the_gp_fraction(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(textwrap.dedent("""
        seeds = 1
        [workload]
        models = ["resnet18"]
        dataset = "cifar10"
        batch = 64
        dataset_size = 5000
        epochs = 2
        [training]
        task = "digits"
        network = "mlp"
        epochs = 2
        gp_fraction = 0.3
    """))
    out = _json(capsys, "evaluate", str(cfg), "--json")
    sur = out["surrogate"]
    assert out["metrics"]["gp_fraction"] == sur["gp_fraction"] == pytest.approx(0.3, abs=0.02)
    for k in ("accuracy", "accuracy_drop", "predictor_gain"):
        assert out["metrics"][k] == sur[k]
