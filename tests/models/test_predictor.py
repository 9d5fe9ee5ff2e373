"""The predictor as a workload: parameters and ops from its shape."""

from __future__ import annotations

import math

import pytest

from models.predictor import PredictorShape, predictor_ops, predictor_params
from models.zoo import build


def test_parameters_closed_form():
    net = build("resnet50")
    assert net.max_fan_in == 512 * 3 * 3
    shape = PredictorShape(inputs=8, hidden=(64, 32))
    # 8 -> 64 -> 32 -> 4608, weights and biases
    assert predictor_params(shape, net) == (8 * 64 + 64) + (64 * 32 + 32) + (32 * 4608 + 4608)
    coded = PredictorShape(inputs=8, hidden=(64,), layer_code=True)
    n_pred = sum(l.kind in ("conv", "linear") for l in net.layers)
    assert predictor_params(coded, net) == ((8 + n_pred) * 64 + 64) + (64 * 4608 + 4608)


def test_ops_per_layer():
    net = build("resnet18")
    shape = PredictorShape(inputs=16, hidden=(32,))
    inf = predictor_ops(shape, net, 4, train=False)
    trn = predictor_ops(shape, net, 4, train=True)
    predicted = [i for i, l in enumerate(net.layers) if l.kind in ("conv", "linear")]
    assert sorted(set(inf.layer.tolist())) == predicted
    # one sample per output channel: inference MACs = sum over layers of C_out * (16*32 + 32*head)
    head = net.max_fan_in
    expected = sum(net.layers[i].out_channels * (16 * 32 + 32 * head) for i in predicted)
    assert inf.macs.sum() == expected
    # training adds the loss, both gradient GEMMs of every predictor layer but the first's input
    # gradient, and one Adam update of the whole predictor
    g = trn.mask("pred_igrad", "pred_wgrad")
    assert trn.macs[g].sum() == sum(net.layers[i].out_channels * (16 * 32 + 2 * 32 * head) for i in predicted)
    assert (trn.phase == "pred_update").sum() == 1
    assert set(trn.phase) - set(inf.phase) == {"pred_loss", "pred_igrad", "pred_wgrad", "pred_update"}


def test_tiled_head():
    net = build("vgg16")
    shape = PredictorShape(inputs=8, hidden=(64,), head=1000)
    ops = predictor_ops(shape, net, 2, train=False)
    fc0 = next(i for i, l in enumerate(net.layers) if l.name == "classifier.0")
    rows = ops.mask("pred_fwd") & (ops.layer == fc0) & (ops.N == 1000)
    assert ops.repeat[rows].tolist() == [math.ceil(512 * 7 * 7 / 1000)]


@pytest.mark.parametrize("bad", [dict(inputs=0), dict(hidden=(0,)), dict(head=-1)])
def test_bad_shapes(bad):
    with pytest.raises(ValueError, match="predictor"):
        PredictorShape(**bad)


def test_factored_head_and_training_steps():
    net = build("resnet18")
    full = PredictorShape(inputs=8, hidden=(64,))
    fac = PredictorShape(inputs=8, hidden=(64,), factored=True)
    assert predictor_params(fac, net) == (8 * 64 + 64) + (64 * 1 + 1)
    inf_full = predictor_ops(full, net, 4, train=False)
    inf_fac = predictor_ops(fac, net, 4, train=False)
    assert inf_fac.macs.sum() < inf_full.macs.sum()
    # the outer product with the input patch is traffic on the vector unit
    assert inf_fac.vec_elems.sum() > inf_full.vec_elems.sum()
    twice = PredictorShape(inputs=8, hidden=(64,), train_steps=2)
    t1 = predictor_ops(full, net, 4, train=True)
    t2 = predictor_ops(twice, net, 4, train=True)
    g = ("pred_igrad", "pred_wgrad")
    assert t2.macs[t2.mask(*g)].sum() == 2 * t1.macs[t1.mask(*g)].sum()
    assert (t2.phase == "pred_update").sum() == 2
