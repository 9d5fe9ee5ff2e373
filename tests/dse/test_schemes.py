"""Every gradient scheme a configuration accepts is costed by `dse evaluate`; an incomplete one is refused
before anything is trained (exit 2, the field named). The scheme lists come from the registry."""

from __future__ import annotations

import dataclasses
import json
import textwrap

import pytest

from dse.cli import main
from models.schemes import PREDICTING, REGISTRY
from models.surrogate.config import SCHEMES

CONFIG = """\
[workload]
models = ["resnet18"]
dataset = "cifar10"
batch = 64
dataset_size = 5000
epochs = 1

[training]
scheme = "{scheme}"

[hardware]
rows = 32
cols = 32

[schedule]
gp_fraction = 0.4
"""


def _evaluate(tmp_path, capsys, scheme: str, *extra: str) -> tuple[int, str, str]:
    f = tmp_path / f"{scheme}.toml"
    f.write_text(textwrap.dedent(CONFIG.format(scheme=scheme)))
    with pytest.raises(SystemExit) as e:
        main(["evaluate", str(f), *extra])
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_configurable_scheme_is_costed_with_a_what_if_gp_fraction(tmp_path, capsys, scheme):
    code, out, err = _evaluate(tmp_path, capsys, scheme, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["surrogate"] is None  # the what-if fraction: nothing trained
    m = d["metrics"]
    assert m["speedup"] > 0 and m["energy_j"] > 0
    # a scheme with GP steps is costed by its own ops, so its job differs from plain BP's on the same array
    assert (m["speedup_same_hw"] == 1.0) == (scheme == "bp"), (scheme, m["speedup_same_hw"])


def test_a_scheme_without_its_cost_half_is_refused_before_training(tmp_path, capsys, monkeypatch):
    """As a contributor who wrote a scheme's training half only would find it: `dse evaluate` says which
    half is missing and where, with exit 2, and trains nothing."""
    import models.surrogate as surrogate

    rec = REGISTRY["efb"]
    monkeypatch.setitem(REGISTRY, "efb", dataclasses.replace(rec, cost=None))
    monkeypatch.setattr(surrogate, "evaluate", lambda *a, **k: pytest.fail("trained an incomplete scheme"))
    cfg = tmp_path / "efb.toml"
    cfg.write_text(CONFIG.format(scheme="efb").replace("[schedule]\ngp_fraction = 0.4\n", ""))
    with pytest.raises(SystemExit) as e:
        main(["evaluate", str(cfg)])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.startswith("dse: error: training.scheme: scheme 'efb' has no accelerator cost") and \
        "models/schemes/efb.py" in err and len(err.strip().splitlines()) == 1


def test_dse_evaluate_text_lists_every_metric_the_registry_computed(tmp_path, capsys):
    """The text summary is built from the metric registry: every metric of the JSON, with its unit."""
    from dse.evaluation import metrics as registry

    code, out, err = _evaluate(tmp_path, capsys, "adagp", "--json")
    assert code == 0, err
    computed = json.loads(out)["metrics"]
    code, text, err = _evaluate(tmp_path, capsys, "adagp")
    assert code == 0, err
    lines = {ln.split()[0]: ln for ln in text.splitlines() if ln.strip()}
    for name in computed:
        assert name in lines and registry.get(name).unit in lines[name], name


def test_dse_pipeline_costs_the_gp_step_of_the_scheme_it_is_given(capsys):
    periods = {}
    for scheme in PREDICTING:
        with pytest.raises(SystemExit) as e:
            main(["pipeline", "--model", "resnet18", "--dataset", "cifar10", "--stages", "2", "--gp-fraction",
                  "0.5", "--scheme", scheme, "--width", "0", "--json"])
        out = capsys.readouterr()
        assert e.value.code == 0, out.err
        d = json.loads(out.out)
        periods[scheme] = (d[0] if isinstance(d, list) else d)["period"]
    assert len(set(periods.values())) == len(periods), periods  # each scheme's own ops
    with pytest.raises(SystemExit) as e:
        main(["pipeline", "--model", "resnet18", "--gp-fraction", "0.5", "--scheme", "null"])
    assert e.value.code == 2 and "--scheme" in capsys.readouterr().err
