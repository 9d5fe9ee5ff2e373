"""Tests of the gradient-scheme interface (the training half of models.schemes): each scheme against an independent
closed form or finite differences, the controls, the large-batch probe, and the schemes on every network."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.schemes import CONTROLS, DIAGNOSTICS, REGISTRY, Step, make_scheme, predicted_layers
from models.surrogate import SurrogateConfig, evaluate
from models.surrogate.config import SCHEMES
from models.surrogate.layers import softmax_cross_entropy
from models.surrogate.nets import build_network
from models.surrogate.predictors import grad_matrix
from models.surrogate.train import train_run

FAST = dict(task="digits", epochs=2, batch_size=32)


def _bp_step(net, cfg, x, y):
    """Forward and full backward of one batch: the Step a scheme's bp_step sees."""
    _, d = softmax_cross_entropy(net.forward(x), y)
    net.backward(d)
    layers = predicted_layers(cfg, net)
    return Step(net, layers, y, d, [grad_matrix(l.dW, l.db) for l in layers], 0, 0.05, x)


def _cos(a, b):
    a, b = a.ravel(), b.ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_every_configurable_scheme_and_control_is_registered():
    assert set(SCHEMES) <= set(REGISTRY) and set(CONTROLS) <= set(SCHEMES)
    assert set(DIAGNOSTICS) <= set(REGISTRY) and not set(DIAGNOSTICS) & set(SCHEMES)
    assert REGISTRY["efb"].training_class().size_knobs == ("efb_rank",)
    assert REGISTRY["local"].training_class().size_knobs == ("local_width",)
    for name in ("efb_rank", "efb_decay", "local_width"):
        assert name in SurrogateConfig().to_dict()


@pytest.mark.parametrize(
    "data,field",
    [({"efb_rank": 11}, "efb_rank"), ({"efb_rank": 0}, "efb_rank"), ({"efb_decay": 1.0}, "efb_decay"),
     ({"local_width": 0}, "local_width"), ({"scheme": "efb2"}, "scheme")],
)
def test_new_knobs_reject_bad_values_naming_the_field(data, field):
    with pytest.raises(ValueError, match=rf"^{field}: "):
        SurrogateConfig.from_dict(data)


def test_efb_below_the_classifier_converges_to_one_layer_of_backprop_and_rank_matters():
    """Closed form: the last hidden layer's dL/dh is exactly e W_out^T, linear in the output error, so at
    full rank the refit map reproduces that layer's true gradient; a rank-1 map cannot."""
    rng = np.random.default_rng(0)
    cos = {}
    for rank in (10, 1):
        cfg = SurrogateConfig(network="mlp", width=16, efb_rank=rank, efb_decay=0.9)
        net = build_network("mlp", 16, 12, 10, np.random.default_rng(1))
        s = make_scheme("efb", cfg, net, 10, 0)
        assert s.n_params() > 0 and all(np.all(p == 0) for k, p in s.state().items() if k.startswith("P"))
        for _ in range(30):  # fixed weights, fresh batches
            x = rng.standard_normal((32, 12, 1)).astype(np.float32)
            step = _bp_step(net, cfg, x, rng.integers(0, 10, 32))
            preds = s.bp_step(step)
        cos[rank] = _cos(preds[-1], step.trues[-1])
        assert s.P[-1].shape == (10, rank) and s.Q[-1].shape == (rank, 16)
        # the GP-step prediction is the same map applied to the same batch
        gp = s.gp_step(step)
        np.testing.assert_allclose(gp[-1], s.bp_step(step)[-1], rtol=1e-4, atol=1e-7)
    assert cos[10] > 0.999, cos
    assert cos[1] < 0.9, cos


def test_local_classifier_gradient_matches_finite_differences_of_its_local_loss():
    """The layer's update in a GP step is the gradient of its own head's loss (pooling, head, the layer)
    with respect to the layer's weights, and nothing from later layers."""
    rng = np.random.default_rng(2)
    cfg = SurrogateConfig(network="cnn", width=3, local_width=3)
    net = build_network("cnn", 3, 16, 10, rng, dtype=np.float64)
    s = make_scheme("local", cfg, net, 10, 0)
    layer = predicted_layers(cfg, net)[1]  # length 8 -> 3 pooled positions (uneven bins)
    i = 1
    s.A[i] = rng.standard_normal(s.A[i].shape)
    s.c[i] = rng.standard_normal(10)
    x = rng.standard_normal((4, 16, 1))
    y = rng.integers(0, 10, 4)

    def local_loss():
        net.forward(x)
        return softmax_cross_entropy(s._pooled(i, layer.out) @ s.A[i] + s.c[i], y)[0]

    local_loss()
    g = s.gp_step(Step(net, predicted_layers(cfg, net), y, None, None, 0, 0.0, x))[i]  # lr 0: the head stays
    num = np.zeros_like(layer.W)
    eps = 1e-6
    for idx in np.ndindex(layer.W.shape):
        old = layer.W[idx]
        layer.W[idx] = old + eps
        fp = local_loss()
        layer.W[idx] = old - eps
        fm = local_loss()
        layer.W[idx] = old
        num[idx] = (fp - fm) / (2 * eps)
    np.testing.assert_allclose(g[:, :-1].T, num, rtol=1e-5, atol=1e-8)
    assert s.A[0].shape == (3 * 3, 10) and s.A[2].shape == (2 * 3, 10)  # width capped by the layer's length


def test_truncated_gives_the_layer_below_the_classifier_its_exact_gradient_only():
    rng = np.random.default_rng(3)
    cfg = SurrogateConfig()
    net = build_network("cnn", 4, 16, 10, rng)
    x = rng.standard_normal((8, 16, 1)).astype(np.float32)
    y = rng.integers(0, 10, 8)
    step = _bp_step(net, cfg, x, y)
    s = make_scheme("truncated", cfg, net, 10, 0)
    out = s.gp_step(step)
    assert out[0] is None and out[1] is None
    np.testing.assert_allclose(out[2], step.trues[2], rtol=1e-5, atol=1e-8)
    zero = make_scheme("null_momentum", cfg, net, 10, 0).gp_step(step)
    assert all(np.all(z == 0) and z.shape == t.shape for z, t in zip(zero, step.trues))
    assert make_scheme("null", cfg, net, 10, 0).gp_step(step) == [None, None, None]


def test_null_momentum_keeps_moving_with_momentum_where_null_stands_still():
    cfg = SurrogateConfig(**FAST, warmup=0.5, adaptive=False, gp_fraction=0.5)
    total = train_run(cfg, "bp", 0)["steps"]
    mask = np.zeros(total, dtype=bool)
    mask[total // 2 :] = True  # BP first half, then GP only
    runs = {c: train_run(cfg, c, 0, replay=mask) for c in CONTROLS}
    assert runs["null"]["accuracy"] != runs["null_momentum"]["accuracy"]
    assert len({r["accuracy"] for r in runs.values()}) == 3
    with pytest.raises(ValueError, match="needs the GP mask"):
        train_run(cfg, "truncated", 0)


@pytest.mark.parametrize("network", ["cnn", "cnn_pool", "mlp"])
@pytest.mark.parametrize("scheme", ["efb", "local", "dni", "adagp"])
def test_every_scheme_trains_on_every_network_and_reports_quality(network, scheme):
    cfg = SurrogateConfig(**FAST, network=network, width=8, scheme=scheme, adaptive=False, gp_fraction=0.4)
    run = train_run(cfg, scheme, 0)
    assert not run["diverged"] and run["accuracy"] > 30
    assert -1 <= run["cos"] <= 1 and -1 <= run["cos_large"] <= 1 and -1 <= run["cos_large_bp"] <= 1
    assert np.isfinite(run["loss_decrease"]) and run["loss_decrease_bp"] > 0  # a true gradient step helps
    assert run["predictor_params"] > 0
    assert all("cos_large" in e and "loss_decrease" in e for e in run["epochs"])


def test_the_probe_does_not_change_training(monkeypatch):
    import models.surrogate.train as T

    cfg = SurrogateConfig(**FAST, scheme="efb", adaptive=False, gp_fraction=0.4)
    probed = train_run(cfg, "efb", 0)
    monkeypatch.setattr(T, "PROBE_EVERY", 10**9)  # only the first post-warm-up BP step is probed
    once = train_run(cfg, "efb", 0)
    for k in ("accuracy", "phases", "cos", "relerr"):
        assert probed[k] == once[k], k
    assert probed["cos_large"] != once["cos_large"]


def test_efb_beats_adagp_quality_and_adaptive_thresholds_act_on_it():
    """efb's prediction is far closer to the true gradient than ADA-GP's; the adaptive schedule's
    thresholds act on that signal: a low threshold lengthens GP phases, a threshold above reach shortens them."""
    base = SurrogateConfig(**FAST, scheme="efb", adaptive=True, gp_phase_min=1, gp_phase_max=8, gp_phase_init=2,
                           relerr_threshold=10.0)
    lo = train_run(base.replace(cos_threshold=0.0), "efb", 0)
    hi = train_run(base.replace(cos_threshold=0.99), "efb", 0)
    assert lo["gp_fraction"] > 0.6 and hi["gp_fraction"] < 0.25, (lo["gp_fraction"], hi["gp_fraction"])
    ada = train_run(SurrogateConfig(**FAST, adaptive=False, gp_fraction=0.4), "adagp", 0)
    assert lo["cos"] > ada["cos"] + 0.3


def test_evaluate_reports_every_control_and_shares_them_between_schemes(tmp_path, monkeypatch):
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))
    cfg = SurrogateConfig(**FAST, adaptive=False, gp_fraction=0.4)
    d = evaluate(cfg.replace(scheme="efb", efb_rank=5), seeds=(3, 4)).to_dict()
    for c, key in (("null", "predictor_gain"), ("null_momentum", "gain_vs_null_momentum"),
                   ("truncated", "gain_vs_truncated")):
        assert d[key] == pytest.approx(d["accuracy"] - d[f"accuracy_{c}"])
        assert d[f"{key}_std"] >= 0
        assert [p[key] for p in d["per_seed"]] == [p["accuracy"] - p[f"accuracy_{c}"] for p in d["per_seed"]]
    for k in ("cos", "cos_large", "cos_large_bp", "loss_decrease", "loss_decrease_bp"):
        assert d[k] is not None and k in d["per_seed"][0]
    json.dumps(d)
    # a fixed schedule's mask does not depend on the scheme: local reuses efb's controls
    evaluate(cfg.replace(scheme="local"), seeds=(3, 4))
    for c in CONTROLS:
        assert len(list((tmp_path / "surrogate").rglob(f"{c}/*.json"))) == 2, c
    t = evaluate(cfg.replace(scheme="truncated"), seeds=(3,)).to_dict()
    assert t["gain_vs_truncated"] == 0 and t["accuracy"] == t["accuracy_truncated"]


def test_cli_first_seed(tmp_path):
    from typer.testing import CliRunner

    from dse.cli import app

    p = tmp_path / "s.toml"
    p.write_text(SurrogateConfig(**FAST, scheme="local", adaptive=False, gp_fraction=0.4).to_toml())
    res = CliRunner().invoke(app, ["surrogate", str(p), "--seeds", "2", "--first-seed", "5", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["seeds"] == [5, 6] and "gain_vs_truncated" in d and "cos_large" in d["timeline"][0]
    res = CliRunner().invoke(app, ["surrogate", str(p), "--seeds", "1", "--first-seed", "5"])
    assert res.exit_code == 0 and "seeds 5..5" in res.output and "gain_vs_null_momentum" in res.output
