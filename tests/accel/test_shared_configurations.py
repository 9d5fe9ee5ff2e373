"""Sweeps over grids: configurations that share their array and buffers are costed once and expanded.

The vectorized path (what ``dse`` calls for a whole hardware grid per training setting) must give every
field of every configuration exactly as costing that configuration alone does (the scalar path), also with
``sum_over`` reductions, leakage, mixed dataflows, convolution geometry and predictor units.
"""

from __future__ import annotations

import itertools
from dataclasses import fields

import numpy as np
import pytest

from accel import DATAFLOW_NAMES, Hardware, HardwareArray, gemm_cost, op_im2col, vector_cost
from accel.schedule import ENERGY_KEYS, step_costs
from models.schemes import scheme_plan
from models.surrogate import SurrogateConfig
from models.zoo import build


def _grid() -> list[Hardware]:
    """A grid like a study's: few arrays and buffers, each at several bandwidths, clocks, predictor units."""
    hws = []
    for (r, c), df, (i, f), bw, clk, unit in itertools.product(
            [(8, 16), (32, 32)], DATAFLOW_NAMES, [(16.0, 64.0), (64.0, 16.0)], [12.8, 51.2], [1.0, 0.5],
            [(0, 0, 0.0), (8, 8, 24.0)]):
        hws.append(Hardware(rows=r, cols=c, dataflow=df, ifmap_kb=i, filter_kb=f, ofmap_kb=32.0,
                            bandwidth_gbps=bw, clock_ghz=clk, pred_rows=unit[0], pred_cols=unit[1],
                            pred_kb=unit[2]))
    return hws


def _gemms(name="resnet18"):
    ops = build(name, dataset="cifar10").training_ops(batch=4)
    g = ops.repeat > 0
    return ops, g, (ops.M[g], ops.K[g], ops.N[g], ops.repeat[g]), op_im2col(ops, g)


def _items(cost):
    for f in fields(cost):
        v = getattr(cost, f.name)
        if isinstance(v, dict):
            for k, vv in v.items():
                yield f"{f.name}.{k}", vv
        else:
            yield f.name, v


@pytest.mark.parametrize("leakage", [True, False])
def test_grid_equals_each_configuration_alone(leakage):
    hws = _grid()
    arr = HardwareArray.from_list(hws)
    _, _, (M, K, N, R), geo = _gemms()
    many = dict(_items(gemm_cost(M, K, N, R, hw=arr, im2col=geo, include_leakage=leakage)))
    for i, hw in enumerate(hws):
        for name, v in _items(gemm_cost(M, K, N, R, hw=hw, im2col=geo, include_leakage=leakage)):
            # the same arithmetic on the same numbers: bit for bit
            assert np.array_equal(many[name][i], v), (name, hw)


def test_grid_reduced_equals_each_configuration_alone():
    hws = _grid()
    arr = HardwareArray.from_list(hws)
    ops, g, (M, K, N, R), geo = _gemms()
    phases = np.unique(ops.phase[g])
    W = (ops.phase[g][:, None] == phases[None, :]).astype(float)
    many = dict(_items(gemm_cost(M, K, N, R, hw=arr, im2col=geo, sum_over=W)))
    vmany = vector_cost(ops.vec_elems[~g], hw=arr, sum_over=np.ones((~g).sum()))
    for i, hw in enumerate(hws):
        for name, v in _items(gemm_cost(M, K, N, R, hw=hw, im2col=geo)):
            # reduced once per shared row: equal up to the order of the sums
            np.testing.assert_allclose(many[name][i], v @ W if name != "utilization" else many[name][i],
                                       rtol=1e-12, err_msg=name)
        one = vector_cost(ops.vec_elems[~g], hw=hw)
        np.testing.assert_allclose(vmany.total_cycles[i], one.total_cycles.sum(), rtol=1e-12)
        np.testing.assert_allclose(vmany.energy_pj["total"][i], one.energy_pj["total"].sum(), rtol=1e-12)


def test_training_step_on_a_grid_equals_each_configuration_alone():
    hws = _grid()
    net = build("resnet18", dataset="cifar10")
    ops = net.training_ops(4)
    plan = scheme_plan(SurrogateConfig(scheme="adagp"), net, 4)
    many = step_costs(ops, plan=plan, hw=HardwareArray.from_list(hws))
    for i in range(0, len(hws), 3):  # a third of them alone (a few seconds)
        one = step_costs(ops, plan=plan, hw=hws[i])
        for kind in ("bp", "scheme_bp", "scheme_gp"):
            a, b = getattr(many, kind), getattr(one, kind)
            np.testing.assert_allclose(a.time_s[i], b.time_s, rtol=1e-12)
            np.testing.assert_allclose(a.dram_bytes[i], b.dram_bytes, rtol=1e-12)
            for k in ENERGY_KEYS:
                np.testing.assert_allclose(a.energy_pj[k][i], b.energy_pj[k], rtol=1e-12, atol=1e-6)
