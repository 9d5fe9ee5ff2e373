"""Layering (the owner's rule): ``accel/`` and ``models/`` never import Optuna (nor torch), nor each other's
upper layers: ``accel`` knows nothing of ``models`` or ``dse``, ``models`` nothing of ``accel`` or ``dse``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN = {"accel": ("optuna", "torch", "models", "dse"), "models": ("optuna", "torch", "accel", "dse")}


def _imports(text: str) -> set[str]:
    """Top-level package names imported anywhere in a file (also inside functions)."""
    found = set(re.findall(r"^\s*import\s+([A-Za-z_]\w*)", text, re.M))
    found |= set(re.findall(r"^\s*from\s+([A-Za-z_]\w*)[\w.]*\s+import\b", text, re.M))
    for names in re.findall(r"^\s*import\s+(.+)$", text, re.M):  # import a, b as c
        found |= {n.strip().split(".")[0].split(" ")[0] for n in names.split(",")}
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_never_imports_optuna_or_upper_layers(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    for path in files:
        bad = _imports(path.read_text()) & set(FORBIDDEN[package])
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_check_sees_imports_inside_functions():
    text = "def f():\n    import optuna\n    from dse.search.study import x\n"
    assert {"optuna", "dse"} <= _imports(text)
