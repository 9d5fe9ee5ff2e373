"""Fixtures for study tests: a small, fast study (digits surrogate, an MLP, one seed) in a temporary folder."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

FAST_STUDY = """
[study]
name = "tiny"
sampler = "nsga2"
seed = 3
trials = 12
seeds = 1
population = 4

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

[hardware]
dataflow = "ws"

[reference]
rows = 16
cols = 16
dataflow = "ws"

[space.training]
pred_width = [8, 32]

[space.hardware]
rows = [8, 16, 32]
cols = [8, 16, 32]
bandwidth_gbps = [6.4, 25.6]
predictor_unit = [{ pred_rows = 0, pred_cols = 0, pred_kb = 0.0 }, { pred_rows = 8, pred_cols = 8, pred_kb = 24.0 }]

[[objectives]]
metric = "accuracy_drop"

[[objectives]]
metric = "speedup"

[[objectives]]
metric = "area_mm2"

[[constraints]]
metric = "area_mm2"
max = 4.0
"""


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "dse-cache"))
    monkeypatch.delenv("DSE_STORAGE", raising=False)


@pytest.fixture
def study_file(tmp_path) -> Path:
    p = tmp_path / "tiny.toml"
    p.write_text(textwrap.dedent(FAST_STUDY))
    return p


def write_study(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


@pytest.fixture(scope="session")
def ran_study(tmp_path_factory) -> Path:
    """The fast study above, run once for the whole session (read-only for the tests that use it)."""
    import os

    from dse.search.runner import run_study as run
    from dse.search.studyfile import load_study

    old = os.environ.get("DSE_CACHE_DIR")
    os.environ["DSE_CACHE_DIR"] = str(tmp_path_factory.getbasetemp() / "dse-cache")
    try:
        p = tmp_path_factory.mktemp("ran") / "tiny.toml"
        p.write_text(textwrap.dedent(FAST_STUDY))
        assert run(load_study(p))["complete"] == 12
    finally:
        if old is None:
            os.environ.pop("DSE_CACHE_DIR", None)
        else:
            os.environ["DSE_CACHE_DIR"] = old
    return p
