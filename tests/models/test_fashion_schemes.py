"""Every gradient scheme and control on the residual CNN with batch norm (the ``fashion`` task's network):
the 2-D tensor reorganization of ADA-GP, the batch-norm rule in GP steps, and short runs of every scheme.

Training runs use a 640-image slice of the task (monkeypatched ``load_task``) so that each takes well under
a second; the network, schemes and loop are the real ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import models.surrogate.train as T
from models.schemes import CONTROLS, PREDICTING, REGISTRY
from models.surrogate import SurrogateConfig
from models.surrogate.layers import softmax_cross_entropy
from models.surrogate.nets import build_network
from models.surrogate.nets2d import grid_pooling
from models.surrogate.predictors import AdaGPPredictor, pool_matrix
from models.surrogate.tasks import Task, load_task

SCHEMES = PREDICTING
#: 30 steps (20 leave dni short of 30%)
SMALL = dict(task="fashion", network="resnet", width=4, epochs=3, batch_size=64, lr=0.05)


@pytest.fixture
def small_fashion(monkeypatch):
    full = load_task("fashion")
    task = Task("fashion", full.x[:640], full.y[:640], full.x_test[:200], full.y_test[:200])
    monkeypatch.setattr(T, "load_task", lambda name: task)
    return task


@pytest.fixture
def captured_nets(monkeypatch):
    """The networks train_run builds, in order (to inspect their parameters after a run)."""
    nets = []
    real = T.build_network

    def build(*args, **kwargs):
        net = real(*args, **kwargs)
        nets.append(net)
        return net

    monkeypatch.setattr(T, "build_network", build)
    return nets


def test_config_pairs_image_tasks_with_image_networks():
    SurrogateConfig(task="fashion", network="resnet")
    SurrogateConfig(task="fashion", network="mlp")
    with pytest.raises(ValueError, match="^network: 'resnet' or 'mlp' for the image task 'fashion'"):
        SurrogateConfig(task="fashion", network="cnn")
    with pytest.raises(ValueError, match="^network: 'resnet' needs an image task"):
        SurrogateConfig(task="mnist1d", network="resnet")
    from models.surrogate.proxy_experiments import FASHION

    committed = SurrogateConfig.from_toml(Path(__file__).resolve().parents[2] / "studies" / "surrogate-fashion.toml")
    assert committed.replace(scheme="adagp", gp_fraction=0.2) == FASHION and committed.epochs == 8


def test_adagp_reorganizes_each_channel_map_into_one_pooled_sample():
    """Independent of the predictor's code: channel c's sample is the batch mean of its H x W map,
    average-pooled onto the 2 x 4 grid (pred_input 8), divided by the RMS of the layer's pooled values."""
    rng = np.random.default_rng(0)
    act = rng.standard_normal((5, 7, 7, 3)).astype(np.float32)
    cfg = SurrogateConfig(pred_input=8)
    p = AdaGPPredictor([10], cfg, rng, pooling=grid_pooling)
    got = p.features(0, act)
    m = act.mean(axis=0)
    rows, cols = pool_matrix(7, 2), pool_matrix(7, 4)  # 7 rows -> 2 bins, 7 columns -> 4 bins
    raw = np.einsum("hwc,hi,wj->cij", m, rows, cols).reshape(3, 8)
    np.testing.assert_allclose(got, raw / np.sqrt(np.mean(raw * raw)), rtol=1e-5)
    assert got.shape == (3, 8)  # one sample per output channel


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_trains_the_residual_network(small_fashion, scheme):
    cfg = SurrogateConfig(**SMALL, scheme=scheme, gp_fraction=0.5)
    run = T.train_run(cfg, scheme, 0)
    assert not run["diverged"] and run["accuracy"] > 30  # 10 classes: chance is 10%
    assert 0.4 < run["gp_fraction"] < 0.6 and run["predictor_params"] > 0
    assert -1 <= run["cos"] <= 1 and np.isfinite(run["loss_decrease_bp"])
    assert REGISTRY[scheme].name == scheme


def test_every_control_replays_the_mask_on_the_residual_network(small_fashion):
    cfg = SurrogateConfig(**SMALL, scheme="efb", gp_fraction=0.5)
    main = T.train_run(cfg, "efb", 0)
    mask = T.phases_to_mask(main["phases"])
    runs = {c: T.train_run(cfg, c, 0, replay=mask) for c in CONTROLS}
    for c, r in runs.items():
        assert r["phases"] == main["phases"] and r["accuracy"] > 30, c
    assert len({r["accuracy"] for r in runs.values()} | {main["accuracy"]}) >= 3


@pytest.mark.parametrize("scheme", ["efb", "adagp", "null_momentum", "null", "truncated"])
def test_batch_norm_scale_changes_on_bp_steps_only_and_its_statistics_on_every_step(small_fashion, captured_nets,
                                                                                     scheme):
    """The rule: in a GP step no scheme updates a batch norm's scale gamma (its true gradient needs the
    backward pass; it is kept, its momentum untouched); the shift beta is the unit's bias and moves with the
    unit's weights; the running statistics move on every training-mode forward, GP steps included. One BP
    step, then GP steps only: gamma must end exactly where the one BP step put it."""
    cfg = SurrogateConfig(**{**SMALL, "epochs": 1}, warmup=0.0, scheme="efb" if scheme in CONTROLS else scheme)
    n_steps = 640 // 64
    mask = np.ones(n_steps, dtype=bool)
    mask[0] = False
    run = T.train_run(cfg, scheme, 0, replay=mask)
    assert run["gp_steps"] == n_steps - 1
    net = captured_nets[-1]
    # the same network after the first step, computed here by hand: forward, backward, one SGD step
    ref = build_network("resnet", 4, (14, 14), 10, np.random.default_rng(0))
    idx = np.random.default_rng([0, 1]).permutation(640)[:64]
    _, d = softmax_cross_entropy(ref.forward(small_fashion.x[idx]), small_fashion.y[idx])
    ref.backward(d)
    lr = np.float32(cfg.lr)  # cosine decay: step 0 has the full rate
    moved_b = moved_w = 0
    # (up to float32 rounding: the run's products use one BLAS thread, these may use more; a GP update
    # moves a parameter by about lr * |gradient|, some 1e-3, far above the 1e-6 tolerance)
    for u, r in zip(net.units, ref.units):
        np.testing.assert_allclose(u.gamma, r.gamma - lr * r.dgamma, rtol=0, atol=1e-6)  # no GP update
        assert not np.allclose(u.bn.running_mean, r.bn.running_mean, atol=1e-4)  # GP forwards moved them
        moved_w += not np.allclose(u.W, r.W - lr * r.dW, rtol=0, atol=1e-6)
        moved_b += not np.allclose(u.b, r.b - lr * r.db, rtol=0, atol=1e-6)
    if scheme == "null":  # predicted units skip GP steps: exactly one update of W and b
        assert moved_w == 0 and moved_b == 0
    elif scheme == "truncated":  # only the unit below the classifier moves in GP steps
        assert moved_w == 1 and moved_b == 1
    else:
        assert moved_w == len(net.units) and moved_b == len(net.units)


@pytest.mark.parametrize("width, cells", [(2, (4, 4, 4)), (3, (9, 9, 4)), (1, (1, 1, 1))])
def test_local_heads_pool_local_width_cells_per_axis_of_a_map(width, cells):
    """On a 2-D map a local head sees ``local_width`` cells per axis, at most the map's size (as the
    accelerator model costs it): 7x7 maps, 4x4 maps, 2x2 maps."""
    from models.schemes import make_scheme

    cfg = SurrogateConfig(task="fashion", network="resnet", width=4, scheme="local", local_width=width)
    net = build_network("resnet", 4, (14, 14), 10, np.random.default_rng(0))
    s = make_scheme("local", cfg, net, 10, 0)
    units = net.param_layers[:-1]
    by_hw = {}
    for u, a, pm in zip(units, s.A, s.pools):
        h, w_, c = net.out_shapes[id(u)]
        assert a.shape == (pm.shape[1] * c, 10) and pm.shape[0] == h * w_
        by_hw[h] = pm.shape[1]
    assert (by_hw[7], by_hw[4], by_hw[2]) == cells


def test_cache_key_of_the_residual_network_carries_its_code_version():
    import hashlib
    import json

    from models.surrogate.evaluation import CACHE_VERSION, NETWORK_VERSIONS, _key

    def plain(knobs):  # the key as it was before network versions: unchanged for the 1-D networks
        text = json.dumps({"v": CACHE_VERSION, "kind": "bp", "knobs": knobs, "seed": 0}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    one_d = SurrogateConfig().bp_key()
    assert _key("bp", one_d, 0) == plain(one_d)
    image = SurrogateConfig(**SMALL).bp_key()
    assert NETWORK_VERSIONS["resnet"] >= 2 and _key("bp", image, 0) != plain(image)


def test_controls_table_has_one_line_per_gp_fraction():
    from models.surrogate.proxy_experiments import markdown_controls

    def row(f, bp):
        r = {"gp_fraction": f, "accuracy_bp": bp, "accuracy_bp_std": 0.5}
        for i, c in enumerate(("null", "null_momentum", "truncated")):
            r[f"accuracy_{c}"], r[f"accuracy_{c}_std"] = bp - 1 - i, 0.25
        return r

    lines = markdown_controls([row(0.2, 85.0), row(0.2, 85.0), row(0.5, 84.0)]).splitlines()
    assert len(lines) == 4
    assert lines[2] == "| 0.20 | 85.00 ± 0.50 | 84.00 ± 0.25 | 83.00 ± 0.25 | 82.00 ± 0.25 |"
    assert lines[3].startswith("| 0.50 | 84.00 ± 0.50 | 83.00 ± 0.25 |")
