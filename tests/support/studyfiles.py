"""The study files the tests copy, in one place: a small, fast study (digits surrogate, an MLP, one seed) and
the edits tests make to it. Imported by the conftest and by tests as ``from studyfiles import ...`` (pytest puts
``tests/support/`` on the path: ``pythonpath`` in pyproject.toml)."""

from __future__ import annotations

import textwrap
from pathlib import Path

__all__ = ["FAST_STUDY", "write_study", "edit", "with_strategy"]

FAST_STUDY = textwrap.dedent("""
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
""")


def write_study(folder: Path, text: str = FAST_STUDY, name: str = "s.toml") -> Path:
    """``text`` written as the study file ``folder/name``."""
    p = Path(folder) / name
    p.write_text(textwrap.dedent(text))
    return p


def edit(old: str, new: str, text: str = FAST_STUDY) -> str:
    """``text`` with ``old`` replaced once (fails loudly if ``text`` does not hold ``old`` exactly once, so a
    change of FAST_STUDY cannot silently turn an edit into a no-op)."""
    assert text.count(old) == 1, f"study text changed: {old!r} not found exactly once"
    return text.replace(old, new, 1)


def with_strategy(text: str, strategy: str, **options) -> str:
    """``text`` with ``[study] strategy`` and the strategy's options (``front_size = 3``...) set."""
    lines = [f'strategy = "{strategy}"', *(f"{k} = {v!r}" for k, v in options.items())]
    return edit("[study]\n", "[study]\n" + "\n".join(lines) + "\n", text)
