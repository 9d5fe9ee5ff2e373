"""Training-step schedules: plain BP, ADA-GP's BP-phase and GP-phase steps, the predictor unit, a job."""

from __future__ import annotations

import numpy as np
import pytest

from accel import Hardware, HardwareArray, gemm_cost, vector_cost
from accel.gemm import op_im2col
from accel.schedule import ENERGY_KEYS, job_cost, step_costs
from models.predictor import PredictorShape, predictor_ops, predictor_params
from models.schemes import SchemePlan
from models.zoo import build, names

HW = Hardware(rows=64, cols=64, dataflow="ws", ifmap_kb=512, filter_kb=512, ofmap_kb=256,
              bandwidth_gbps=50, vector_width=32)
SHAPE = PredictorShape(inputs=8, hidden=(64,))
BATCH = 8


def _adagp(net, shape=SHAPE, batch=BATCH):
    """ADA-GP's plan built by hand from the predictor's ops (models.schemes builds the same from knobs)."""
    predicted = tuple(i for i, l in enumerate(net.layers) if l.kind in ("conv", "linear") and l.params)
    return SchemePlan("adagp", predictor_ops(shape, net, batch, train=True),
                      predictor_ops(shape, net, batch, train=False), gp_update=predicted,
                      params=predictor_params(shape, net))


def _costs(name, hw=HW, shape=SHAPE, free=False):
    net = build(name)
    ops = net.training_ops(BATCH)
    if free:
        return net, ops, step_costs(ops, hw=hw)
    return net, ops, step_costs(ops, plan=_adagp(net, shape), hw=hw)


@pytest.mark.parametrize("name", names())
def test_gp_step_is_faster_and_cheaper_than_bp(name):
    _, _, s = _costs(name)
    assert s.scheme_gp.time_s < s.bp.time_s < s.scheme_bp.time_s
    assert s.scheme_gp.energy_total_pj < s.bp.energy_total_pj < s.scheme_bp.energy_total_pj
    assert s.scheme_gp.dram_bytes < s.bp.dram_bytes


def test_no_gp_and_no_warmup_costs_bp_plus_the_predictor():
    _, _, s = _costs("resnet18")
    n = 1000
    bp = job_cost(s, n_steps=n, scheme="bp")
    ada = job_cost(s, n_steps=n, warmup_frac=0.0, gp_fraction=0.0)
    overhead = s.scheme_bp.parts_s["predictor"]
    assert overhead > 0
    assert ada.time_s == pytest.approx(bp.time_s + n * overhead, rel=1e-12)
    assert ada.steps_gp == 0 and ada.steps_bp == n
    # energy: BP's plus the predictor's own work and the leakage over the time it adds
    assert ada.energy_total_j > bp.energy_total_j


def test_job_phase_mix():
    _, _, s = _costs("resnet18")
    job = job_cost(s, n_steps=1000, warmup_frac=0.2, gp_fraction=0.5)
    assert (job.steps_bp, job.steps_gp) == (600, 400)
    assert job.time_s == pytest.approx(600 * s.scheme_bp.time_s + 400 * s.scheme_gp.time_s)
    with pytest.raises(ValueError):
        job_cost(s, n_steps=10, gp_fraction=1.5)


def test_free_predictor_gp_step_is_forward_plus_update():
    """With a free predictor, a GP step costs exactly the forward ops and the predicted layers' updates,
    computed here op by op with the accelerator's own GEMM and vector costs."""
    net, ops, s = _costs("resnet18", free=True)
    fwd = ops.phase == "fwd"
    g = gemm_cost(ops.M[fwd], ops.K[fwd], ops.N[fwd], ops.repeat[fwd], hw=HW, include_leakage=False,
                  im2col=op_im2col(ops, fwd))
    conv_linear = {i for i, l in enumerate(net.layers) if l.kind in ("conv", "linear")}
    upd = (ops.phase == "update") & np.isin(ops.layer, list(conv_linear))
    vec = (ops.phase == "fwd_vec") | upd
    v = vector_cost(ops.vec_elems[vec], hw=HW, include_leakage=False)
    expected = (g.total_cycles.sum() + v.total_cycles.sum()) / (HW.clock_ghz * 1e9)
    assert s.scheme_gp.time_s == pytest.approx(expected, rel=1e-9)
    assert s.scheme_gp.parts_s["predictor"] == 0.0
    # and the free predictor's BP-phase step is the plain-BP step
    assert s.scheme_bp.time_s == pytest.approx(s.bp.time_s, rel=1e-12)
    e_dyn = g.energy_pj["total"].sum() + v.energy_pj["total"].sum()
    assert s.scheme_gp.energy_total_pj - s.scheme_gp.energy_pj["leakage"] == pytest.approx(e_dyn, rel=1e-9)


@pytest.mark.parametrize("name", ["resnet50", "vgg16", "mobilenet_v2", "transformer_base", "densenet121"])
def test_dedicated_predictor_unit_is_never_slower_than_time_sharing(name):
    units = [(0, 0, 0.0), (4, 4, 12.0), (8, 8, 24.0), (16, 16, 48.0), (32, 32, 96.0), (64, 64, 192.0)]
    hws = HardwareArray.from_list([HW.replace(pred_rows=r, pred_cols=c, pred_kb=kb) for r, c, kb in units])
    net = build(name)
    ops = net.training_ops(BATCH)
    s = step_costs(ops, plan=_adagp(net), hw=hws)
    for step in (s.scheme_bp, s.scheme_gp):
        assert (step.time_s[1:] <= step.time_s[0] * (1 + 1e-12)).all()
    # a large enough unit hides some of the predictor's inference behind the forward pass
    assert s.scheme_gp.time_s[-1] < s.scheme_gp.time_s[0]


def test_vectorized_over_configurations_equals_one_by_one():
    hws = [HW, HW.replace(rows=32, dataflow="os"), HW.replace(bandwidth_gbps=10, pred_rows=16, pred_cols=16,
                                                               pred_kb=48)]
    net = build("resnet18")
    ops = net.training_ops(BATCH)
    plan = _adagp(net)
    many = step_costs(ops, plan=plan, hw=HardwareArray.from_list(hws))
    for i, hw in enumerate(hws):
        one = step_costs(ops, plan=plan, hw=hw)
        for kind in ("bp", "scheme_bp", "scheme_gp"):
            a, b = getattr(many, kind), getattr(one, kind)
            assert a.time_s[i] == pytest.approx(b.time_s, rel=1e-12)
            for k in ENERGY_KEYS:
                assert a.energy_pj[k][i] == pytest.approx(b.energy_pj[k], rel=1e-12, abs=1e-6)


def test_stash_stays_on_chip_when_it_fits():
    """Enough SRAM for every activation: no stash traffic; a small chip pays DRAM writes and reads."""
    net = build("resnet18", dataset="cifar10")
    ops = net.training_ops(2)
    total_stash = ops.stash_bytes.sum()
    big = HW.replace(ifmap_kb=total_stash / 1024 + 1)
    small = HW.replace(ifmap_kb=64, filter_kb=64, ofmap_kb=64)
    sb, ss = step_costs(ops, hw=big), step_costs(ops, hw=small)
    # the stash's DRAM energy is 2 x bytes x e_dram on the small chip, zero on the big one
    dram_diff = ss.bp.dram_bytes - ss.scheme_gp.dram_bytes
    assert dram_diff > 2 * 0.5 * total_stash
    assert sb.bp.parts_s["stash"] == 0.0


def test_predictor_shape_drives_its_cost():
    net = build("resnet50")
    small = PredictorShape(inputs=4, hidden=(16,))
    big = PredictorShape(inputs=64, hidden=(256, 256))
    ts = [step_costs(net.training_ops(BATCH), plan=_adagp(net, sh), hw=HW) for sh in (small, big)]
    assert ts[0].scheme_gp.time_s < ts[1].scheme_gp.time_s
    assert ts[0].scheme_bp.parts_s["predictor"] < ts[1].scheme_bp.parts_s["predictor"]
    # a narrower, tiled head does the same head work in more passes of a smaller layer
    tiled = PredictorShape(inputs=8, hidden=(64,), head=512)
    ops = predictor_ops(tiled, net, BATCH, train=False)
    head_rows = (ops.phase == "pred_fwd") & (ops.N == 512)
    assert (ops.repeat[head_rows] >= 1).all() and ops.repeat[head_rows].max() == int(np.ceil(net.max_fan_in / 512))


# ---------------------------------------------------------------------------------------------------------
# every scheme's plan

def _plan(net, scheme, **kw):
    from models.schemes import scheme_plan
    from models.surrogate import SurrogateConfig

    return scheme_plan(SurrogateConfig(scheme=scheme, **kw), net, BATCH)


def test_unknown_op_phases_raise_instead_of_costing_nothing():
    import dataclasses

    net = build("resnet18")
    ops = net.training_ops(BATCH)
    plan = _plan(net, "efb")
    bogus = dataclasses.replace(plan.gp, phase=np.where(plan.gp.phase == "pred_fwd", "pred_forward",
                                                        plan.gp.phase))
    with pytest.raises(ValueError, match="plan.gp: unknown op phase 'pred_forward'"):
        step_costs(ops, plan=dataclasses.replace(plan, gp=bogus), hw=HW)
    with pytest.raises(ValueError, match="training ops: unknown op phase 'wgrad2'"):
        step_costs(dataclasses.replace(ops, phase=np.where(ops.phase == "wgrad", "wgrad2", ops.phase)), hw=HW)
    with pytest.raises(ValueError, match="layer 999"):
        step_costs(ops, plan=dataclasses.replace(plan, gp_wgrad=(999,)), hw=HW)


@pytest.mark.parametrize("name", ["vgg16", "resnet18", "resnet50", "densenet121", "mobilenet_v2"])
def test_scheme_gp_steps_order_by_their_work(name):
    """A GP step of error feedback or local classifiers computes every hidden layer's weight gradient: more
    than ADA-GP's (forward and a small predictor), less than a BP step; the controls cost the forward."""
    net = build(name)
    ops = net.training_ops(BATCH)
    # (local heads of 4 x 4 pooled positions to 1000 classes cost more than BP on some ImageNet models)
    s = {k: step_costs(ops, plan=_plan(net, k, local_width=1), hw=HW)
         for k in ("adagp", "efb", "local", "null", "truncated")}
    bp = s["null"].bp.time_s
    assert s["null"].scheme_gp.time_s < s["adagp"].scheme_gp.time_s < s["efb"].scheme_gp.time_s < bp
    assert s["adagp"].scheme_gp.time_s < s["local"].scheme_gp.time_s < bp
    assert s["null"].scheme_gp.time_s < s["truncated"].scheme_gp.time_s < s["efb"].scheme_gp.time_s
    # their BP steps add their training work; the controls' are plain BP
    assert s["local"].scheme_bp.time_s > bp and s["efb"].scheme_bp.time_s > bp
    assert s["null"].scheme_bp.time_s == bp
    # the GP step's backward part is exactly the selected weight-gradient GEMMs (efb: no input gradients)
    wg = (ops.phase == "wgrad") & np.isin(ops.layer, _plan(net, "efb").gp_wgrad)
    g = gemm_cost(ops.M[wg], ops.K[wg], ops.N[wg], ops.repeat[wg], hw=HW, include_leakage=False,
                  im2col=op_im2col(ops, wg))
    assert s["efb"].scheme_gp.parts_s["backward"] == pytest.approx(g.total_cycles.sum() / 1e9, rel=1e-9)


@pytest.mark.parametrize("scheme", ["efb", "local", "dni"])
def test_dedicated_unit_serves_every_scheme_and_is_never_slower(scheme):
    units = [(0, 0, 0.0), (8, 8, 24.0), (32, 32, 96.0), (64, 64, 192.0)]
    hws = HardwareArray.from_list([HW.replace(pred_rows=r, pred_cols=c, pred_kb=kb) for r, c, kb in units])
    net = build("resnet18", dataset="cifar10")
    s = step_costs(net.training_ops(BATCH), plan=_plan(net, scheme), hw=hws)
    for step in (s.scheme_bp, s.scheme_gp):
        assert (step.time_s[1:] <= step.time_s[0] * (1 + 1e-12)).all()
    if scheme != "dni":  # (dense modules far larger than the layers gain nothing from a small unit's buffers)
        # a large unit hides the feedback / heads behind the main array's work
        assert s.scheme_gp.time_s[-1] < s.scheme_gp.time_s[0]


def test_job_of_another_scheme_is_refused():
    net = build("resnet18")
    s = step_costs(net.training_ops(BATCH), plan=_plan(net, "efb"), hw=HW)
    assert job_cost(s, n_steps=10, gp_fraction=0.5, scheme="efb").steps_gp == 5
    with pytest.raises(ValueError, match="efb"):
        job_cost(s, n_steps=10, gp_fraction=0.5, scheme="adagp")
