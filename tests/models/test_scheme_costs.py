"""Gradient schemes as workloads (the cost half of models.schemes): every scheme with a cost lowers for every
zoo model, with the ops its semantics say (the training half has its own tests, test_surrogate_schemes.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from accel.schedule import EXTRA_PHASES
from models.predictor import predicted_layers
from models.schemes import COSTED, DNIShape, EFBShape, LocalShape, dni_ops, hidden_layers, output_layer, scheme_plan
from models.surrogate import SurrogateConfig
from models.zoo import build, names

BATCH = 4


def knobs(scheme, **kw):
    return SurrogateConfig(scheme=scheme, **kw)


@pytest.mark.parametrize("name", names())
def test_every_scheme_lowers_for_every_zoo_model(name):
    net = build(name)
    n = len(net.layers)
    for scheme in COSTED:
        plan = scheme_plan(knobs(scheme), net, BATCH)
        for table in (plan.train, plan.gp):
            assert set(table.phase.tolist()) <= set(EXTRA_PHASES), (scheme, set(table.phase.tolist()))
            assert ((table.layer >= -1) & (table.layer < n)).all()
            gemm = np.isin(table.phase, ("pred_fwd", "pred_refwd", "pred_igrad", "pred_wgrad"))
            assert (table.M[gemm] > 0).all() and (table.vec_elems[~gemm] > 0).all()
        assert set(plan.gp_update) <= set(predicted_layers(net))


def test_label_aware_schemes_predict_the_hidden_layers_and_train_on_bp_steps():
    net = build("resnet18", dataset="cifar10")
    hidden = hidden_layers(net)
    out = output_layer(net)
    assert out not in hidden and len(hidden) == len(predicted_layers(net)) - 1
    for scheme in ("efb", "local", "dni"):
        plan = scheme_plan(knobs(scheme), net, BATCH)
        assert set(plan.gp.layer[plan.gp.layer >= 0].tolist()) == set(hidden)
        # every hidden layer's weight gradient and the classifier's true one; no input gradients
        assert plan.gp_wgrad == tuple(sorted(hidden + [out])) and plan.gp_igrad == ()
        assert len(plan.train.phase) and plan.params > 0
    assert scheme_plan(knobs("efb"), net, BATCH).gp_stash == tuple(range(len(net.layers)))
    assert scheme_plan(knobs("local"), net, BATCH).gp_stash == ()
    # without true_output_grad the classifier is predicted like the others
    plan = scheme_plan(knobs("local", true_output_grad=False), net, BATCH)
    assert out in set(plan.gp.layer.tolist())


def test_size_knobs_drive_parameters_closed_form():
    net = build("resnet18", dataset="cifar10")
    hidden = hidden_layers(net)
    sizes = [math.prod(net.layers[i].out) for i in hidden]
    for r in (1, 4, 10):
        assert scheme_plan(knobs("efb", efb_rank=r), net, BATCH).params == sum(10 * r + r * d for d in sizes)
    for w in (1, 2, 4):
        pooled = [net.layers[i].out[0] * min(w, net.layers[i].out[1]) * min(w, net.layers[i].out[2])
                  for i in hidden]
        assert scheme_plan(knobs("local", local_width=w), net, BATCH).params == sum(f * 10 + 10 for f in pooled)
    _, conv, _ = dni_ops(net, BATCH, DNIShape(kernel=3), train=True)  # the convolutional what-if
    assert conv == sum((net.layers[i].out[0] + 10) * 9 * net.layers[i].out[0] + net.layers[i].out[0]
                              for i in hidden)


def test_size_knobs_cost_their_macs_and_energy_on_the_accelerator():
    """Each size knob is costed, not only counted: a GP step's extra MACs in closed form (efb: ``e U_l`` and
    ``(e U_l) V_l``; local: the head's forward, weight gradient and input gradient), and on the accelerator a
    larger size costs strictly more energy per GP step (and never less time) on both kinds of predictor unit."""
    from accel import Hardware
    from accel.schedule import step_costs

    net = build("resnet18", dataset="cifar10")
    ops = net.training_ops(BATCH)
    hidden = hidden_layers(net)
    sizes = [math.prod(net.layers[i].out) for i in hidden]
    for r in (1, 4, 10):
        gp = scheme_plan(knobs("efb", efb_rank=r), net, BATCH).gp
        assert float(gp.macs.sum()) == sum(BATCH * 10 * r + BATCH * r * d for d in sizes)
    for w in (1, 2, 4):
        pooled = [net.layers[i].out[0] * min(w, net.layers[i].out[1]) * min(w, net.layers[i].out[2])
                  for i in hidden]
        gp = scheme_plan(knobs("local", local_width=w), net, BATCH).gp
        assert float(gp.macs.sum()) == sum(3 * BATCH * f * 10 for f in pooled)
    hw = Hardware(rows=32, cols=32, dataflow="ws", ifmap_kb=128.0, filter_kb=128.0, ofmap_kb=128.0,
                  bandwidth_gbps=25.6, vector_width=32)
    ladders = {"efb": ("efb_rank", (1, 2, 5, 10)), "local": ("local_width", (1, 2, 4, 8)),
               "adagp": ("pred_width", (2, 16, 64, 256))}
    for unit in (hw, hw.replace(pred_rows=16, pred_cols=16, pred_kb=48.0)):
        for scheme, (knob, values) in ladders.items():
            steps = [step_costs(ops, plan=scheme_plan(knobs(scheme, **{knob: v}), net, BATCH), hw=unit)
                     for v in values]
            energy = [s.scheme_gp.energy_total_pj for s in steps]
            time = [s.scheme_gp.time_s for s in steps]
            assert all(a < b for a, b in zip(energy, energy[1:])), (scheme, unit.pred_rows, energy)
            assert all(a <= b * (1 + 1e-12) for a, b in zip(time, time[1:])), (scheme, unit.pred_rows, time)


def test_controls():
    net = build("resnet18", dataset="cifar10")
    weighted = predicted_layers(net)
    out = output_layer(net)
    null, mom, trunc = (scheme_plan(knobs(s), net, BATCH) for s in ("null", "null_momentum", "truncated"))
    for p in (null, mom, trunc):
        assert not len(p.train.phase) and p.params == 0
    assert null.gp_update == (out,) and mom.gp_update == tuple(weighted)
    below = weighted[-2]
    assert trunc.gp_wgrad == (below, out) and trunc.gp_igrad == (out,)
    assert trunc.gp_bwd_vec == tuple(range(below + 1, out))


@pytest.mark.parametrize("bad", [lambda: EFBShape(rank=0), lambda: LocalShape(width=0), lambda: DNIShape(kernel=-1)])
def test_bad_sizes(bad):
    with pytest.raises(ValueError):
        bad()


def test_unknown_scheme_names_the_known_ones():
    import types

    with pytest.raises(ValueError, match="efb"):
        scheme_plan(types.SimpleNamespace(scheme="bogus"), build("resnet18"), BATCH)


@pytest.mark.parametrize("network", ["cnn", "cnn_pool", "mlp"])
def test_surrogate_networks_as_workloads_match_the_trained_ones(network):
    from models.surrogate.nets import build_network
    from models.surrogate.workload import surrogate_net

    g = surrogate_net(network, 25, "mnist1d")
    trained = build_network(network, 25, 40, 10, np.random.default_rng(0))
    assert g.params == trained.n_params()
    # the same output sizes per layer with weights (what the schemes' ops scale with)
    x = np.zeros((1, 40, 1), np.float32)
    sizes = []
    for layer in trained.layers:
        x = layer.forward(x)
        if layer.has_params:
            sizes.append(x[0].size)
    assert [math.prod(g.layers[i].out) for i in predicted_layers(g)] == sizes


def test_dni_on_the_surrogate_network_has_the_surrogates_module_size():
    from models.surrogate.workload import surrogate_net

    # three hidden conv layers of 25 x 20, 25 x 10, 25 x 5 outputs: (d + 10) x d weights + d biases each
    assert scheme_plan(knobs("dni"), surrogate_net(), 32).params == 337750
