"""The gradient schemes' name table (models.schemes.registry): every registered scheme has both halves it
needs, every list of names derives from the table, and a half-written scheme is reported, not trained."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

import models.schemes as S
from models.schemes import REGISTRY, SchemeRecord, check_complete, costable, register
from models.schemes.base import GradientScheme


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_registered_scheme_has_both_halves(name):
    rec = REGISTRY[name]
    check_complete(name)  # raises (one line) if a half is missing
    cls = rec.training_class()
    assert issubclass(cls, GradientScheme) and cls.name == name
    assert rec.module.startswith("models.schemes.")
    if rec.needs_cost:
        assert costable(name) and callable(rec.lowering())
    else:
        assert not costable(name)


def test_every_list_of_names_derives_from_the_table():
    import importlib

    config, evaluation, proxy_experiments = (importlib.import_module(f"models.surrogate.{m}")
                                             for m in ("config", "evaluation", "proxy_experiments"))

    kinds = {n: r.kind for n, r in REGISTRY.items()}
    assert config.SCHEMES == tuple(n for n, k in kinds.items() if k != "diagnostic")
    assert evaluation.CONTROLS == S.CONTROLS == tuple(n for n, k in kinds.items() if k == "control")
    assert set(evaluation.GAIN_KEYS) == set(evaluation.CONTROLS) and evaluation.GAIN_KEYS["null"] == "predictor_gain"
    assert S.DIAGNOSTICS == tuple(n for n, k in kinds.items() if k == "diagnostic")
    assert proxy_experiments.SCHEMES == S.PREDICTING == tuple(n for n, k in kinds.items() if k == "predicting")
    assert S.COSTED == tuple(n for n in REGISTRY if REGISTRY[n].needs_cost)
    assert config.RULES["scheme"] == ("choice", config.SCHEMES)


@pytest.fixture
def throwaway():
    """Register records for the test; removed afterwards."""
    added = []

    def add(rec):
        added.append(rec.name)
        return register(rec)

    yield add
    for name in added:
        REGISTRY.pop(name, None)


def test_a_scheme_with_only_its_training_half_is_reported_incomplete(throwaway, monkeypatch):
    """A new scheme's module with its GradientScheme subclass but no lowering (as if models/schemes/halfway.py
    had been written halfway), registered as a configurable scheme."""
    module = types.ModuleType("models.schemes.halfway")

    class Halfway(GradientScheme):
        name = "halfway"

    module.Halfway = Halfway
    monkeypatch.setitem(sys.modules, module.__name__, module)
    throwaway(SchemeRecord("halfway", module.__name__, "predicting", training="Halfway"))
    assert REGISTRY["halfway"].training_class() is Halfway
    with pytest.raises(ValueError, match=r"^scheme 'halfway' has no accelerator cost "
                                         r"\(models/schemes/halfway\.py: define its lowering, and name it in its "
                                         r"SchemeRecord\)$"):
        check_complete("halfway")
    assert not costable("halfway")
    # the cost model refuses it with the same message instead of failing later
    with pytest.raises(ValueError, match="has no accelerator cost"):
        S.scheme_plan(type("Knobs", (), {"scheme": "halfway"})(), None, 4)
    # naming a lowering the module does not define is the same gap
    REGISTRY.pop("halfway")
    throwaway(SchemeRecord("halfway", module.__name__, "predicting", training="Halfway", cost="halfway_plan"))
    with pytest.raises(ValueError, match=r"^scheme 'halfway' has no accelerator cost: models/schemes/halfway\.py "
                                         r"defines no 'halfway_plan' \(the name its SchemeRecord gives"):
        check_complete("halfway")


def test_a_training_class_not_written_or_misnamed_is_reported(throwaway):
    throwaway(SchemeRecord("unwritten", "models.schemes.unwritten", "predicting", training="Unwritten",
                           cost="unwritten_plan"))
    with pytest.raises(ValueError, match=r"^scheme 'unwritten': its module 'models\.schemes\.unwritten' "
                                         r"\(SchemeRecord\) does not exist: no file models/schemes/unwritten\.py$"):
        check_complete("unwritten")
    throwaway(SchemeRecord("pkgslip", "models.schemez.pkgslip", "predicting", training="P", cost="p_plan"))
    with pytest.raises(ValueError, match=r"^scheme 'pkgslip': its module 'models\.schemez\.pkgslip' "):
        check_complete("pkgslip")  # a slip in the package part of the path too
    # the module written, the class not (or misspelled in the record): the name looked for is named
    throwaway(SchemeRecord("typo", "models.schemes.controls", "predicting", training="Nul", cost="null_plan"))
    with pytest.raises(ValueError, match=r"^scheme 'typo' has no training behaviour: models/schemes/controls\.py "
                                         r"defines no 'Nul' \(the name its SchemeRecord gives; define its "
                                         r"GradientScheme subclass\)$"):
        check_complete("typo")
    # a class whose name is not the record's is a copy-paste slip
    throwaway(SchemeRecord("renamed", "models.schemes.controls", "predicting", training="Null", cost="null_plan"))
    with pytest.raises(ValueError, match=r"^scheme 'renamed': models/schemes/controls\.py: Null is not"):
        check_complete("renamed")


def test_diagnostics_and_the_reference_need_no_cost_and_unknown_names_are_refused():
    for name in S.DIAGNOSTICS + S.names("reference"):
        assert not REGISTRY[name].needs_cost and REGISTRY[name].cost is None
        check_complete(name)
    with pytest.raises(ValueError, match=r"^scheme: one of adagp, .* has a cost plan \(got 'bp'\)$"):
        S.scheme_plan(type("Knobs", (), {"scheme": "bp"})(), None, 4)
    with pytest.raises(ValueError, match=r"^scheme: one of 'adagp', .* \(got 'nope'\)$"):
        check_complete("nope")
    with pytest.raises(ValueError, match="already registered"):
        register(SchemeRecord("efb", "models.schemes.efb", "predicting", training="ErrorFeedback"))
    with pytest.raises(ValueError, match="^kind: "):
        SchemeRecord("x", "models.schemes.x", "proposal")
    with pytest.raises(ValueError, match="gain_key"):
        SchemeRecord("x", "models.schemes.x", "control", training="X")


def test_the_name_table_is_light():
    """The surrogate's cache hit reads the table: importing it (and the package) loads no scheme's module."""
    code = ("import sys, models.surrogate.evaluation, models.schemes; "
            "print(sorted(m for m in sys.modules if m.startswith('models.schemes.') or m in "
            "('models.graph', 'models.predictor', 'models.surrogate.predictors', 'models.surrogate.nets')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['models.schemes.registry']"
