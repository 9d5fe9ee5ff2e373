"""Tests of the training surrogate (models.surrogate): layers, predictors, schedule, config, cache, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from models.surrogate import SurrogateConfig, evaluate
from models.surrogate.config import RULES
from models.surrogate.gradcheck import check_layer as _check_layer, numerical_gradient as _num_grad
from models.surrogate.layers import Conv1d, Flatten, Linear, MaxPool1d, softmax_cross_entropy
from models.surrogate.nets import build_network
from models.surrogate.predictors import AdaGPPredictor, DNIPredictor, pool_matrix
from models.surrogate.train import Schedule, phases_to_mask, train_run

ROOT = Path(__file__).resolve().parents[2]
FAST = dict(task="digits", epochs=2, batch_size=32)


# ---------------------------------------------------------------------------------------------------------
# gradient checks (float64, central differences)


@pytest.mark.parametrize(
    "c_in,c_out,k,stride,pad,relu,length",
    [(1, 4, 5, 2, 2, True, 13), (3, 5, 3, 1, 0, True, 9), (2, 3, 5, 2, 1, False, 12), (2, 2, 1, 3, 0, True, 10)],
)
def test_conv1d_gradients_match_finite_differences(c_in, c_out, k, stride, pad, relu, length):
    rng = np.random.default_rng(1)
    layer = Conv1d(c_in, c_out, k, stride=stride, pad=pad, relu=relu, rng=rng, dtype=np.float64)
    layer.b[:] = rng.standard_normal(c_out) * 0.1
    _check_layer(layer, rng.standard_normal((3, length, c_in)), rng)


@pytest.mark.parametrize("relu", [True, False])
def test_linear_gradients_match_finite_differences(relu):
    rng = np.random.default_rng(2)
    layer = Linear(7, 5, relu=relu, rng=rng, dtype=np.float64)
    layer.b[:] = rng.standard_normal(5) * 0.1
    _check_layer(layer, rng.standard_normal((4, 7)), rng)


def test_maxpool_and_flatten_gradients_match_finite_differences():
    rng = np.random.default_rng(3)
    _check_layer(MaxPool1d(2), rng.standard_normal((2, 9, 3)), rng)  # odd length: remainder dropped
    _check_layer(Flatten(), rng.standard_normal((2, 4, 3)), rng)


def test_softmax_cross_entropy_gradient():
    rng = np.random.default_rng(4)
    z = rng.standard_normal((5, 10))
    y = rng.integers(0, 10, 5)
    _, d = softmax_cross_entropy(z.copy(), y)
    np.testing.assert_allclose(d, _num_grad(lambda: softmax_cross_entropy(z.copy(), y)[0], z), rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("name", ["cnn", "cnn_pool", "mlp"])
def test_whole_network_backward_matches_finite_differences(name):
    rng = np.random.default_rng(5)
    net = build_network(name, 4, 16, 10, rng, dtype=np.float64)
    x = rng.standard_normal((3, 16, 1))
    y = rng.integers(0, 10, 3)

    def loss():
        return softmax_cross_entropy(net.forward(x), y)[0]

    _, d = softmax_cross_entropy(net.forward(x), y)
    net.backward(d)
    for layer in net.param_layers:
        np.testing.assert_allclose(layer.dW, _num_grad(loss, layer.W), rtol=1e-4, atol=1e-7)


# ---------------------------------------------------------------------------------------------------------
# predictors


def test_pool_matrix_averages_and_upsamples():
    for length, size in [(20, 8), (5, 8), (1, 4), (40, 40)]:
        m = pool_matrix(length, size)
        np.testing.assert_allclose(m.sum(axis=0), 1.0, rtol=1e-6)
        assert (m.sum(axis=1) > 0).all()  # every sample is used
    np.testing.assert_allclose(np.arange(4.0) @ pool_matrix(4, 2), [0.5, 2.5])


def _fixed_problem(rng):
    acts = [rng.standard_normal((8, 10, 6)).astype(np.float32) ** 2,
            rng.standard_normal((8, 5, 4)).astype(np.float32) ** 2]
    trues = [rng.standard_normal((6, 16)).astype(np.float32), rng.standard_normal((4, 25)).astype(np.float32) * 3]
    return acts, trues


@pytest.mark.parametrize("head", [0, 7])  # 0: masked head of width 25; 7: tiled head
def test_adagp_predictor_learns_a_fixed_mapping(head):
    """With fixed (activation, gradient) pairs the predictor's Adam/MSE training must drive the prediction
    to the target (a wrong backward or tiling would stall it)."""
    rng = np.random.default_rng(0)
    cfg = SurrogateConfig(pred_head=head, pred_width=64, pred_lr=0.01, pred_layer_code=True)
    p = AdaGPPredictor([16, 25], cfg, rng)
    acts, trues = _fixed_problem(rng)
    first = p.bp_step(acts, trues)
    assert all(np.all(f == 0) for f in first)  # zero-initialized head: the first prediction is zero
    for _ in range(1500):
        preds = p.bp_step(acts, trues)
    rel = [np.linalg.norm(pr - t) / np.linalg.norm(t) for pr, t in zip(preds, trues)]
    if head == 0:
        assert max(rel) < 0.1, rel
    else:  # a tiled head of 7 cannot represent 25 free values per row: it must still beat zero clearly
        assert max(rel) < 0.9, rel
    np.testing.assert_allclose(p.predict(1, acts[1]), preds[1], rtol=1e-3, atol=1e-3 * np.abs(trues[1]).max())


def test_factored_output_learns_a_rank_one_target_along_the_input_patch_mean():
    """Factored output (ours): row c = s_c * [xbar, 1]; with fixed pairs it must learn s_c, and more Adam
    steps per batch (pred_steps) must get there in fewer batches."""
    rng = np.random.default_rng(0)
    acts, _ = _fixed_problem(rng)
    xins = [np.abs(rng.standard_normal(15)).astype(np.float32), np.abs(rng.standard_normal(24)).astype(np.float32)]
    s = [rng.standard_normal(6).astype(np.float32), 3 * rng.standard_normal(4).astype(np.float32)]
    trues = [np.outer(c, np.append(x, 1.0)).astype(np.float32) for c, x in zip(s, xins)]
    rels = {}
    for steps in (1, 4):
        cfg = SurrogateConfig(pred_output="factored", pred_lr=0.01, pred_layer_code=True, pred_steps=steps)
        p = AdaGPPredictor([16, 25], cfg, np.random.default_rng(1))
        assert p.H == 1 and p.n_params() < 1000
        first = p.bp_step(acts, trues, xins)
        assert all(np.all(f == 0) and f.shape == t.shape for f, t in zip(first, trues))
        for _ in range(300):
            preds = p.bp_step(acts, trues, xins)
        rels[steps] = max(np.linalg.norm(pr - t) / np.linalg.norm(t) for pr, t in zip(preds, trues))
        gp = p.predict(1, acts[1], xins[1])  # a GP step's prediction = the next BP batch's (before learning)
        np.testing.assert_allclose(gp, p.bp_step(acts, trues, xins)[1], rtol=1e-5, atol=1e-6)
    assert rels[4] < 0.1 and rels[4] < rels[1], rels


def test_deviation_features_are_centred_on_a_running_mean():
    """Deviation input (ours): zero on a layer's first call, non-zero once its activations change; 'both'
    concatenates the level and the deviation features."""
    rng = np.random.default_rng(0)
    acts, _ = _fixed_problem(rng)
    p = AdaGPPredictor([16, 25], SurrogateConfig(pred_features="deviation"), rng)
    assert np.all(p.features(0, acts[0]) == 0)
    assert np.all(p.features(0, acts[0]) == 0)  # unchanged activations: still no deviation
    moved = p.features(0, acts[0] * 1.5)
    assert moved.shape == (6, 8) and np.abs(moved).max() > 0
    both = AdaGPPredictor([16, 25], SurrogateConfig(pred_features="both"), rng)
    assert both.features(1, acts[1]).shape == (4, 16)


def test_dni_module_learns_a_linear_target():
    rng = np.random.default_rng(1)
    dni = DNIPredictor([12], 10, SurrogateConfig(pred_lr=0.01), rng)
    A = rng.standard_normal((22, 12)).astype(np.float32)
    h = rng.standard_normal((64, 3, 4)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    onehot = np.eye(10, dtype=np.float32)[y]
    target = (np.concatenate([h.reshape(64, -1), onehot], axis=1) @ A).reshape(h.shape)
    for _ in range(2000):
        dni.learn(0, h, y, target)
    rel = np.linalg.norm(dni.synth(0, h, y) - target) / np.linalg.norm(target)
    assert rel < 0.05, rel


# ---------------------------------------------------------------------------------------------------------
# schedule


def test_fixed_schedule_reaches_its_fraction_after_warmup():
    for f, b in [(0.5, 4), (0.35, 3), (0.2, 4), (0.0, 4), (0.8, 2)]:
        cfg = SurrogateConfig(adaptive=False, gp_fraction=f, bp_phase=b, warmup=0.1)
        s = Schedule(cfg, 1000)
        mask = np.array([s.is_gp(t) for t in range(1000)])
        assert not mask[: s.warm].any()
        assert abs(mask[s.warm :].mean() - f) < 0.01, (f, mask[s.warm :].mean())


def _adaptive_mask(cfg, quality, total=400):
    s = Schedule(cfg, total)
    mask = []
    for t in range(total):
        gp = s.is_gp(t)
        mask.append(gp)
        if not gp and t >= s.warm:
            s.report(*quality)
    return np.array(mask), s


def test_adaptive_schedule_grows_with_a_good_predictor_and_shrinks_with_a_bad_one():
    cfg = SurrogateConfig(adaptive=True, cos_threshold=0.3, relerr_threshold=0.9, bp_phase=4, gp_phase_init=4,
                          gp_phase_min=1, gp_phase_max=16)
    good, _ = _adaptive_mask(cfg, (0.5, 0.5))
    bad, _ = _adaptive_mask(cfg, (0.1, 0.5))
    worse_err, _ = _adaptive_mask(cfg, (0.5, 0.95))
    phases = [n for k, n in _phases(good) if k == "gp"]
    assert phases[:4] == [4, 8, 16, 16] and max(phases) == 16  # doubles, bounded by gp_phase_max
    assert [n for k, n in _phases(bad) if k == "gp"][:4] == [4, 2, 1, 1]  # halves, bounded by gp_phase_min
    assert good[40:].mean() > 0.75 and bad[40:].mean() < 0.25 and worse_err[40:].mean() < 0.25


def _phases(mask):
    from models.surrogate.train import _mask_to_phases

    return _mask_to_phases(mask)


# ---------------------------------------------------------------------------------------------------------
# config


def test_config_defaults_round_trip_and_match_the_committed_toml():
    cfg = SurrogateConfig()
    assert SurrogateConfig.from_dict(cfg.to_dict()) == cfg
    import tomllib

    assert SurrogateConfig.from_dict(tomllib.loads(cfg.to_toml())["training"]) == cfg
    committed = SurrogateConfig.from_toml(ROOT / "studies" / "surrogate-default.toml")
    assert committed == cfg
    assert set(RULES) == set(cfg.to_dict())


@pytest.mark.parametrize(
    "data,field",
    [
        ({"epochs": 0}, "epochs"),
        ({"epochs": 2.5}, "epochs"),
        ({"epochs": "3"}, "epochs"),
        ({"lr": 0.0}, "lr"),
        ({"momentum": 1.0}, "momentum"),
        ({"scheme": "sgd"}, "scheme"),
        ({"pred_features": "mean"}, "pred_features"),
        ({"pred_output": "rank2"}, "pred_output"),
        ({"pred_steps": 0}, "pred_steps"),
        ({"adaptive": 1}, "adaptive"),
        ({"pred_width": True}, "pred_width"),
        ({"gp_fraction": 0.99}, "gp_fraction"),
        ({"cos_threshold": float("nan")}, "cos_threshold"),
        ({"gp_phase_min": 8, "gp_phase_max": 4, "gp_phase_init": 4}, "gp_phase_min"),
        ({"gp_phase_init": 40}, "gp_phase_init"),
        ({"colour": 1}, "colour"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(data, field):
    with pytest.raises(ValueError, match=rf"^{field}: "):
        SurrogateConfig.from_dict(data)


def test_config_accepts_integral_floats_and_ints_for_floats():
    cfg = SurrogateConfig.from_dict({"epochs": 3.0, "lr": 1})
    assert cfg.epochs == 3 and isinstance(cfg.epochs, int) and cfg.lr == 1.0 and isinstance(cfg.lr, float)


# ---------------------------------------------------------------------------------------------------------
# training runs (digits, a couple of epochs)


def _strip(run):
    return {k: v for k, v in run.items() if k != "wall_s"}


def test_runs_are_deterministic_and_paired():
    cfg = SurrogateConfig(**FAST, adaptive=False, gp_fraction=0.5)
    a = train_run(cfg, "adagp", 0)
    assert _strip(a) == _strip(train_run(cfg, "adagp", 0))
    # another seed is another initialization and batch order: the training trajectory differs
    other = train_run(cfg, "adagp", 1)
    assert [e["loss"] for e in a["epochs"]] != [e["loss"] for e in other["epochs"]]
    bp = train_run(cfg, "bp", 0)
    # the null control with no GP step is plain BP, step for step (same init, same batches)
    no_gp = np.zeros(bp["steps"], dtype=bool)
    assert train_run(cfg, "null", 0, replay=no_gp)["accuracy"] == bp["accuracy"]
    # a predictor that is trained but never applied does not change the model
    zero = cfg.replace(gp_fraction=0.0)
    assert train_run(zero, "adagp", 0)["accuracy"] == bp["accuracy"]
    # the null replays the scheme's step mask exactly
    null = train_run(cfg, "null", 0, replay=phases_to_mask(a["phases"]))
    assert null["phases"] == a["phases"] and abs(a["gp_fraction"] - 0.5) < 0.02


def test_null_control_skips_updates_of_predicted_layers_only():
    """All post-warm-up steps GP: with a true classifier gradient, only the classifier moves."""
    cfg = SurrogateConfig(**FAST, warmup=0.0)
    total = train_run(cfg, "bp", 0)["steps"]
    gp_all = np.ones(total, dtype=bool)
    import models.surrogate.train as T

    seen = {}
    orig = T.build_network

    def spy(*a, **k):
        net = orig(*a, **k)
        seen["w0"] = [l.W.copy() for l in net.param_layers]
        seen["net"] = net
        return net

    T.build_network = spy
    try:
        T.train_run(cfg, "null", 0, replay=gp_all)
    finally:
        T.build_network = orig
    after = [l.W for l in seen["net"].param_layers]
    assert all(np.array_equal(a, b) for a, b in zip(after[:-1], seen["w0"][:-1]))
    assert not np.array_equal(after[-1], seen["w0"][-1])


@pytest.mark.parametrize("scheme,agent", [("adagp", True), ("dni", False)])
def test_other_schemes_train_and_report_quality(scheme, agent):
    cfg = SurrogateConfig(**FAST, scheme=scheme, agent=agent, adaptive=False, gp_fraction=0.5)
    run = train_run(cfg, scheme, 0)
    assert run["accuracy"] > 50 and not run["diverged"]
    assert -1 <= run["cos"] <= 1 and run["relerr"] >= 0 and run["predictor_params"] > 0
    assert len(run["epochs"]) == 2


def test_oracle_diagnostic_applies_independent_batch_gradients():
    cfg = SurrogateConfig(**FAST, adaptive=False, gp_fraction=0.5)
    o = train_run(cfg, "oracle", 0)
    null = train_run(cfg, "null", 0, replay=phases_to_mask(o["phases"]))
    assert abs(o["gp_fraction"] - 0.5) < 0.02 and o["cos"] is None and o["predictor_params"] == 0
    assert o["accuracy"] != null["accuracy"]
    with pytest.raises(ValueError, match="^scheme: "):
        train_run(cfg, "sgd", 0)


def test_stale_diagnostic_and_predictor_variants_train():
    cfg = SurrogateConfig(**FAST, adaptive=False, gp_fraction=0.5, bp_phase=1)
    st = train_run(cfg, "stale", 0)
    null = train_run(cfg, "null", 0, replay=phases_to_mask(st["phases"]))
    assert abs(st["gp_fraction"] - 0.5) < 0.02 and st["cos"] is None and st["accuracy"] != null["accuracy"]
    var = cfg.replace(pred_features="both", pred_output="factored", pred_steps=2)
    run = train_run(var, "adagp", 0)
    assert not run["diverged"] and -1 <= run["cos"] <= 1 and run["predictor_params"] < 2000


def test_digits_cannot_rank_predictors_but_the_null_control_is_reported():
    """On digits the null control at half GP steps stays close to BP -- the reason MNIST-1D is the default."""
    cfg = SurrogateConfig(task="digits", epochs=5, adaptive=False, gp_fraction=0.5)
    d = evaluate(cfg, seeds=(0,)).to_dict()
    assert d["accuracy_bp"] > 90
    assert d["accuracy_bp"] - d["accuracy_null"] < 3.0


# ---------------------------------------------------------------------------------------------------------
# evaluate and its cache


def test_each_run_records_the_blas_kernel_it_was_trained_with(tmp_path, monkeypatch):
    """Float32 rounding, so a run's figures, depend on the BLAS kernel OpenBLAS picks for the CPU: a result names
    the kernels of its runs (a run cached before runs recorded it: "not recorded")."""
    import glob

    from models.surrogate.train import blas_kernel

    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))
    cfg = SurrogateConfig(**FAST, adaptive=False, gp_fraction=0.4)
    kernel = blas_kernel()
    assert kernel and kernel != "unknown"
    d = evaluate(cfg, seeds=(0,), controls=()).to_dict()
    assert d["blas"] == kernel
    files = glob.glob(str(tmp_path / "surrogate" / "**" / "*.json"), recursive=True)
    assert files and all(json.loads(Path(f).read_text())["blas"] == kernel for f in files)
    for f in files:  # as cached by the code before (no kernel, no checksum)
        e = json.loads(Path(f).read_text())
        del e["blas"], e["check"]
        Path(f).write_text(json.dumps(e))
    old = evaluate(cfg, seeds=(0,), controls=())
    assert old.cached and old.to_dict()["blas"] == "not recorded"


def test_evaluate_result_keys_units_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))
    cfg = SurrogateConfig(**FAST, adaptive=False, gp_fraction=0.4)
    r = evaluate(cfg, seeds=(0, 1))
    d = r.to_dict()
    for k in ("accuracy", "accuracy_bp", "accuracy_null", "accuracy_drop", "predictor_gain", "gp_fraction",
              "accuracy_std", "predictor_gain_std", "per_seed", "timeline", "predictor_params", "wall_s"):
        assert k in d
    assert 0 <= d["accuracy"] <= 100 and 0 <= d["accuracy_bp"] <= 100 and 0 <= d["gp_fraction"] <= 1
    assert d["accuracy_drop"] == pytest.approx(d["accuracy_bp"] - d["accuracy"])
    assert d["predictor_gain"] == pytest.approx(d["accuracy"] - d["accuracy_null"])
    assert [p["seed"] for p in d["per_seed"]] == [0, 1]
    assert not r.cached
    json.dumps(d)  # plain data
    import models.surrogate.train as T

    def no_training(*a, **k):
        raise AssertionError("a cache hit must not train")

    with monkeypatch.context() as mp:  # the benchmark checks the 10 ms target; this guards against re-training
        mp.setattr(T, "train_run", no_training)
        again = evaluate(cfg, seeds=(0, 1))
    assert again.cached and again.to_dict()["accuracy"] == d["accuracy"]
    # the BP reference is cached by its own knobs: another predictor reuses it
    evaluate(cfg.replace(pred_width=8), seeds=(0, 1))
    assert len(list((tmp_path / "surrogate").rglob("bp/*.json"))) == 2
    assert len(list((tmp_path / "surrogate").rglob("adagp/*.json"))) == 4


_RUN = {"accuracy": 50.0, "diverged": False, "steps": 10, "warmup_steps": 1, "gp_fraction": 0.0, "phases": [["bp", 10]],
        "cos": None, "relerr": None, "epochs": 2, "network_params": 100, "predictor_params": 0, "wall_s": 0.1}


@pytest.fixture
def lock_world(tmp_path, monkeypatch):
    """The cache module with training replaced by a recorder (each call returns accuracy 1.0) and flock
    watched: ``blocked`` is set when a process finds the lock held. ``path(seed)``: a run's cache file."""
    import fcntl
    import os
    import threading
    import types

    import models.surrogate.evaluation as E

    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))
    cfg = SurrogateConfig(**FAST, adaptive=False, gp_fraction=0.4)
    w = types.SimpleNamespace(E=E, cfg=cfg, trained=[], blocked=threading.Event(), blocked_on=set(), fcntl=fcntl,
                              path=lambda seed: E._path("bp", E._key("bp", E._knobs(cfg, "bp", None), seed)))
    flock = fcntl.flock

    def watched(fh, op):
        try:
            return flock(fh, op)
        except BlockingIOError:
            w.blocked_on.add(os.fstat(fh.fileno()).st_ino)
            w.blocked.set()
            raise

    monkeypatch.setattr(fcntl, "flock", watched)
    monkeypatch.setattr(E, "_train", lambda *a: w.trained.append(a) or dict(_RUN, accuracy=1.0))
    w.path(0).parent.mkdir(parents=True)
    return w


def _hold(w, seed):
    """Another process's lock on the run of ``seed`` (a separate open of the file: flock locks conflict
    between opens, threads or processes alike)."""
    fh = w.path(seed).with_suffix(".lock").open("a")
    w.fcntl.flock(fh, w.fcntl.LOCK_EX)
    return fh


def _in_thread(fn):
    import threading

    got, done = {}, threading.Event()

    def target():
        try:
            got["out"] = fn()
        finally:
            done.set()

    threading.Thread(target=target, daemon=True).start()
    return got, done


def test_a_run_another_process_is_training_is_waited_for_and_read(lock_world):
    """Two workers missing the same run: the second waits for the first's lock and reads what it stored,
    instead of training it again; the holder removed its lock file, and none is left."""
    w = lock_world
    other = _hold(w, 0)  # the other worker, training the run
    got, done = _in_thread(lambda: w.E.cached_run(w.cfg, "bp", 0, True))
    while not (w.blocked.wait(0.05) or done.is_set()):
        pass
    assert w.blocked.is_set() and not done.is_set()  # this worker waits (without the lock it would train)
    w.E._store(w.path(0), _RUN)  # the other worker stores its run, removes its lock file and lets go
    w.path(0).with_suffix(".lock").unlink()
    other.close()
    assert done.wait(60)
    assert got["out"] == (_RUN, True) and not w.trained
    assert not w.path(0).with_suffix(".lock").exists()
    # a run nobody else is training is trained and stored under the lock, which is then removed
    out, hit = w.E.cached_run(w.cfg, "bp", 1, True)
    assert not hit and len(w.trained) == 1 and out["accuracy"] == 1.0
    assert sorted(p.name for p in w.path(0).parent.iterdir()) == sorted([w.path(0).name, w.path(1).name])


def test_a_holder_that_fails_leaves_the_run_to_the_waiter_or_to_a_newcomer(lock_world):
    """The holder's training fails (it removes its lock file, nothing stored): a waiter then trains the run.
    If a newcomer has meanwhile made a new lock file and taken it, the waiter, whose lock is on the removed
    file, waits for the newcomer instead of training beside it."""
    import os

    w = lock_world
    lock = w.path(0).with_suffix(".lock")
    other = _hold(w, 0)
    got, done = _in_thread(lambda: w.E.cached_run(w.cfg, "bp", 0, True))
    assert w.blocked.wait(60)
    lock.unlink()  # the holder's training raised: nothing stored
    newcomer = _hold(w, 0)
    new_inode = os.fstat(newcomer.fileno()).st_ino
    other.close()
    while not (new_inode in w.blocked_on or done.wait(0.05)):
        pass
    assert not done.is_set() and not w.trained  # waiting for the newcomer
    w.E._store(w.path(0), _RUN)
    lock.unlink()
    newcomer.close()
    assert done.wait(60) and got["out"] == (_RUN, True) and not w.trained
    # the holder fails with nobody else about: the waiter trains the run
    other = _hold(w, 1)
    w.blocked.clear()
    got, done = _in_thread(lambda: w.E.cached_run(w.cfg, "bp", 1, True))
    assert w.blocked.wait(60)
    w.path(1).with_suffix(".lock").unlink()
    other.close()
    assert done.wait(60)
    assert got["out"][1] is False and len(w.trained) == 1
    assert not w.path(1).with_suffix(".lock").exists() and w.path(1).exists()


def test_no_lock_to_be_had_trains_the_run_as_without_one(lock_world, monkeypatch):
    """flock failing (a file system without locks), a holder past LOCK_WAIT_S (hung or stopped), and an
    interruption while waiting (Ctrl-C: the holder's lock file is left to the holder)."""
    w = lock_world
    flock = w.fcntl.flock

    def no_locks(fh, op):
        raise OSError(37, "No locks available")

    monkeypatch.setattr(w.fcntl, "flock", no_locks)
    assert w.E.cached_run(w.cfg, "bp", 0, True)[1] is False and len(w.trained) == 1
    monkeypatch.setattr(w.fcntl, "flock", flock)
    other = _hold(w, 1)
    monkeypatch.setattr(w.E, "LOCK_WAIT_S", 0.0)
    assert w.E.cached_run(w.cfg, "bp", 1, True)[1] is False and len(w.trained) == 2
    assert w.path(1).with_suffix(".lock").exists()  # the holder's, still held
    monkeypatch.setattr(w.E, "LOCK_WAIT_S", 600.0)

    def interrupted(fh, op):
        raise KeyboardInterrupt

    monkeypatch.setattr(w.fcntl, "flock", interrupted)
    w.path(1).unlink()
    with pytest.raises(KeyboardInterrupt):
        w.E.cached_run(w.cfg, "bp", 1, True)
    assert w.path(1).with_suffix(".lock").exists() and len(w.trained) == 2
    other.close()


def test_a_damaged_entry_is_discarded_but_not_a_run_stored_since(lock_world, monkeypatch):
    w = lock_world
    w.path(0).write_text("{not json")
    assert w.E._load(w.path(0)) is None and not w.path(0).exists()
    w.path(0).write_text("{not json")
    load = w.E.json.load

    def replaced_meanwhile(fh):  # another process stores the run while this one reads the damaged file
        w.E._store(w.path(0), _RUN)
        return load(fh)

    monkeypatch.setattr(w.E.json, "load", replaced_meanwhile)
    assert w.E._load(w.path(0)) is None
    monkeypatch.setattr(w.E.json, "load", load)
    assert w.E._load(w.path(0)) == _RUN


def test_scheme_bp_and_null_results():
    cfg = SurrogateConfig(**FAST, adaptive=False, gp_fraction=0.5)
    bp = evaluate(cfg.replace(scheme="bp"), seeds=(0,)).to_dict()
    assert bp["accuracy"] == bp["accuracy_bp"] == bp["accuracy_null"] and bp["gp_fraction"] == 0
    null = evaluate(cfg.replace(scheme="null"), seeds=(0,)).to_dict()
    assert null["predictor_gain"] == 0 and null["gp_fraction"] == pytest.approx(0.5, abs=0.02)


def test_mnist1d_is_generated_offline_and_leaves_the_global_rng_alone(tmp_path, monkeypatch):
    import requests

    def no_network(*a, **k):
        raise AssertionError("network access")

    monkeypatch.setattr(requests, "get", no_network)
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))
    from models.surrogate.tasks import load_task

    np.random.seed(123)
    before = np.random.random()
    np.random.seed(123)
    task = load_task("mnist1d")
    assert np.random.random() == before
    assert task.x.shape == (4000, 40, 1) and task.x_test.shape == (1000, 40, 1) and task.x.dtype == np.float32
    assert (tmp_path / "data" / "mnist1d-v1.npz").exists()


# ---------------------------------------------------------------------------------------------------------
# command line


def _app():
    import typer

    from dse.cli.surrogate import surrogate

    app = typer.Typer()
    app.command("surrogate")(surrogate)
    app.command("other")(lambda: None)  # two commands, so typer keeps the sub-command name
    return app


def test_cli_json_and_table(tmp_path):
    from typer.testing import CliRunner

    cfg_path = tmp_path / "s.toml"
    cfg_path.write_text(SurrogateConfig(**FAST, adaptive=False, gp_fraction=0.5).to_toml())
    runner = CliRunner()
    res = runner.invoke(_app(), ["surrogate", str(cfg_path), "--seeds", "1", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    for k in ("accuracy", "accuracy_bp", "accuracy_null", "accuracy_drop", "predictor_gain", "gp_fraction"):
        assert isinstance(d[k], float)
    res = runner.invoke(_app(), ["surrogate", str(cfg_path), "--seeds", "1"])
    assert res.exit_code == 0 and "phase timeline" in res.output and "predictor_gain" in res.output
    # one seed has no spread: its column says "-", not a measured 0.00
    line = next(ln for ln in res.output.splitlines() if "accuracy_drop (points)" in ln)
    assert line.rstrip(" │|").endswith("-") and "0.00 " not in line.split("│")[-2], line


@pytest.mark.parametrize(
    "text,field",
    [('[training]\nepochs = "ten"\n', "epochs"), ("[training]\nfoo = 1\n", "foo"),
     ("[training]\ngp_fraction = 2.0\n", "gp_fraction"), ("[other]\nx = 1\n", r"\[training\]"),
     ("[training\n", "not valid TOML")],
)
def test_cli_bad_input_is_a_usage_error(tmp_path, text, field):
    from dse.cli.surrogate import load_config
    from dse.errors import UsageError

    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(UsageError, match=field) as info:
        load_config(p)
    assert "\n" not in str(info.value)
    with pytest.raises(UsageError, match="cannot be read"):
        load_config(tmp_path / "missing.toml")


# ---------------------------------------------------------------------------------------------------------
# acceptance on MNIST-1D (the default task)


@pytest.mark.slow
def test_plain_bp_default_cnn_reaches_88_percent_on_mnist1d():
    cfg = SurrogateConfig(scheme="bp")
    d = evaluate(cfg, seeds=(0, 1, 2)).to_dict()
    assert d["accuracy_bp"] >= 88.0, d["per_seed"]
    assert d["steps"] == 1250 and d["network_params"] < 50_000
