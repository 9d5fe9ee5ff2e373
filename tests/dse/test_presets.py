"""The preset studies load, and the predictor preset searches each scheme with its own size knob only."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from accel import HardwareArray
from dse.evaluation.evaluator import hardware_metrics
from dse.search.studyfile import load_study
from models.surrogate import SurrogateConfig

ROOT = Path(__file__).resolve().parents[2]
SIZE_KNOBS = {"adagp": {"pred_width"}, "efb": {"efb_rank"}, "local": {"local_width"}, "dni": set()}


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "studies").glob("*.toml")
                                        if "[study]" in p.read_text()))
def test_presets_load(name):
    spec = load_study(ROOT / "studies" / name)
    assert spec.space.searched()


def test_predictor_preset_bundles_each_scheme_with_its_size_knob():
    spec = load_study(ROOT / "studies" / "predictors.toml")
    knobs = dict(spec.space.searched())
    predictor = knobs["training.predictor"]
    schemes = {}
    for label in predictor.values():
        table = predictor.table(label)
        scheme = table.pop("scheme")
        assert set(table) == SIZE_KNOBS[scheme], label  # no knob of another scheme is sampled with it
        schemes.setdefault(scheme, set()).add(tuple(sorted(table.items())))
    assert set(schemes) == {"adagp", "efb", "local", "dni"}
    assert len(schemes["efb"]) >= 2 and len(schemes["local"]) >= 2
    schedules = [knobs["training.schedule"].table(v) for v in knobs["training.schedule"].values()]
    assert any(s["adaptive"] for s in schedules) and any(not s["adaptive"] for s in schedules)
    # every training setting is a valid configuration; schemes differ in cost on the same hardware
    hw = HardwareArray.from_list([spec.base.reference.replace(pred_rows=16, pred_cols=16, pred_kb=48.0)])
    speed = {}
    for p, s in itertools.product(predictor.values(), knobs["training.schedule"].values()):
        params = {"training.predictor": p, "training.schedule": s,
                  **{n: k.values()[0] for n, k in spec.space.searched() if n.startswith("hardware.")}}
        cfg = spec.configuration(params)
        assert isinstance(cfg.training, SurrogateConfig)
        if s == knobs["training.schedule"].values()[0]:
            speed[p] = float(hardware_metrics(cfg, hw, 0.4)["speedup_same_hw"][0])
    assert len({round(v, 6) for v in speed.values()}) >= 4, speed
    assert np.isfinite(list(speed.values())).all()
