"""accel.pipeline from a zoo model: partition, per-stage costs, jobs; one stage and one micro-batch is the
single-accelerator model exactly."""

import itertools
import math

import numpy as np
import pytest

from accel import Hardware
from accel.pipeline import Link, layer_times, model_pipeline, partition, pipeline_job, ring_allreduce_s, step_counts
from accel.schedule import job_cost, step_costs
from models import zoo
from models.schemes import scheme_plan
from models.surrogate import SurrogateConfig


def _brute(costs, parts):
    n = len(costs)
    best = math.inf
    for cuts in itertools.combinations(range(1, n), parts - 1):
        b = (0,) + cuts + (n,)
        best = min(best, max(sum(costs[b[i]:b[i + 1]]) for i in range(parts)))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_partition_is_optimal_and_contiguous(seed):
    rng = np.random.default_rng(seed)
    n, parts = int(rng.integers(4, 10)), int(rng.integers(1, 4))
    c = rng.random(n) * rng.choice([1, 10], n)
    starts = partition(c, parts)
    assert starts[0] == 0 and len(starts) == parts and starts == sorted(set(starts))
    b = starts + [n]
    got = max(c[b[i]:b[i + 1]].sum() for i in range(parts))
    assert got == pytest.approx(_brute(list(c), parts))
    with pytest.raises(ValueError, match="stages"):
        partition(c, n + 1)


@pytest.fixture(scope="module")
def resnet18():
    net = zoo.build("resnet18", dataset="cifar10")
    return net


def _inputs(net, mb, wb=2):
    ops = net.training_ops(mb, word_bytes=wb)
    out = np.array([math.prod(l.out) * mb * wb for l in net.layers], float)
    par = np.array([l.params * wb for l in net.layers], float)
    plan = scheme_plan(SurrogateConfig(), net, mb, word_bytes=wb)
    return ops, out, par, plan


@pytest.mark.parametrize("name", ["adagp", "dni", "null"])
def test_one_stage_one_microbatch_is_the_single_accelerator_job(resnet18, name):
    hw = Hardware(rows=16, cols=16, dataflow="ws", pred_rows=8, pred_cols=8, pred_kb=24.0)
    ops = resnet18.training_ops(32)
    out = np.array([math.prod(l.out) * 32 * 2 for l in resnet18.layers], float)
    par = np.array([l.params * 2 for l in resnet18.layers], float)
    plan = scheme_plan(SurrogateConfig(scheme=name), resnet18, 32)
    mp = model_pipeline(ops, stages=1, hw=hw, out_bytes=out, param_bytes=par, plan=plan)
    steps = step_costs(ops, plan=plan, hw=hw)
    for scheme, gpf in (("bp", 0.0), (name, 0.4)):
        ref = job_cost(steps, n_steps=500, warmup_frac=0.1, gp_fraction=gpf, scheme=scheme)
        job = pipeline_job(mp, "1f1b", 1, n_steps=500, samples_per_step=32, scheme=scheme, warmup_frac=0.1,
                           gp_fraction=gpf)
        assert (job.steps_bp, job.steps_gp) == (ref.steps_bp, ref.steps_gp)
        assert job.time_s == pytest.approx(float(ref.time_s), rel=1e-12)
        assert job.energy_total_j == pytest.approx(float(ref.energy_total_j), rel=1e-9)
        assert job.energy_j["leakage"] == pytest.approx(float(ref.energy_j["leakage"]), rel=1e-9)
        assert job.energy_j["link"] == 0.0 and job.bubble_rate == pytest.approx(0.0, abs=1e-12)


def test_stage_costs_add_up_to_the_whole_model_when_nothing_spills(resnet18):
    # SRAM large enough for every stash: no stash traffic, so the stages' parts sum to the whole model's
    hw = Hardware(rows=16, cols=16, ifmap_kb=1 << 20, filter_kb=1 << 20, ofmap_kb=1 << 20)
    ops, out, par, _ = _inputs(resnet18, 8)
    whole = step_costs(ops, hw=hw).bp.parts_s
    mp = model_pipeline(ops, stages=3, hw=hw, out_bytes=out, param_bytes=par, link=Link(10.0, 2.0))
    c = mp.bp
    assert sum(c.F) == pytest.approx(whole["forward"], rel=1e-9)
    assert sum(c.B) + sum(c.W) == pytest.approx(whole["backward"], rel=1e-9)
    assert sum(c.U) == pytest.approx(whole["update"], rel=1e-9)
    assert sum(c.W) == pytest.approx(layer_times(ops, hw)[1].sum(), rel=1e-12)
    # a cut after layer l sends l's output: latency + bytes / bandwidth
    for s, start in enumerate(mp.starts[1:]):
        assert c.msg_bytes[s] == out[start - 1]
        assert c.comm[s] == pytest.approx(2e-6 + out[start - 1] / 10e9)
    assert sum(mp.grad_bytes) == par.sum()
    # balanced: no cut can be moved to lower the largest stage's layer-time sum
    t = layer_times(ops, hw)[0]
    b = list(mp.starts) + [len(t)]
    assert max(t[b[i]:b[i + 1]].sum() for i in range(3)) == pytest.approx(_brute(list(t), 3))


def test_more_stages_run_faster(resnet18):
    hw = Hardware(rows=16, cols=16, dataflow="ws")
    ops, out, par, plan = _inputs(resnet18, 8)
    jobs = []
    for p in (1, 2, 4):
        mp = model_pipeline(ops, stages=p, hw=hw, out_bytes=out, param_bytes=par)
        jobs.append(pipeline_job(mp, "1f1b", 8, n_steps=100, samples_per_step=64))
    assert jobs[0].time_s > jobs[1].time_s > jobs[2].time_s
    # 1F1B's first stage holds p micro-batches of its layers' activations
    assert [j.step["bp"].peak_act[0] for j in jobs] == [1.0, 2.0, 4.0]
    assert jobs[2].peak_act_bytes >= 4 * mp.bp.act_bytes[0]
    assert jobs[2].throughput == pytest.approx(100 * 64 / jobs[2].time_s)
    # leakage: every device over the whole job, idle or not
    assert jobs[2].energy_j["leakage"] == pytest.approx(jobs[2].time_s * 4 * mp.leakage_w[0])


def test_data_parallel_replicas_all_reduce_the_gradients(resnet18):
    hw = Hardware(rows=16, cols=16, dataflow="ws")
    ops, out, par, plan = _inputs(resnet18, 8)
    link = Link(25.0, 3.0)
    mp = model_pipeline(ops, stages=2, hw=hw, out_bytes=out, param_bytes=par, link=link, plan=plan,
                        pred_param_bytes=1000.0)
    one = pipeline_job(mp, "zb-h1", 4, n_steps=10, samples_per_step=64, link=link)
    four = pipeline_job(mp, "zb-h1", 4, n_steps=10, samples_per_step=64, replicas=4, link=link)
    g = max(mp.grad_bytes)
    assert four.allreduce_s["bp"] == pytest.approx(2 * 3 * 3e-6 + 1.5 * g / 25e9)
    assert four.allreduce_s["bp"] == float(np.max(ring_allreduce_s(np.array(mp.grad_bytes), 4, link)))
    assert one.allreduce_s["bp"] == 0.0 and four.time_s > one.time_s
    assert four.link_bytes["bp"] == pytest.approx(4 * one.link_bytes["bp"] + 2 * 3 * sum(mp.grad_bytes))
    # a GP step exchanges the predicted gradients (the layers with predicted weights), a BP step of ADA-GP the
    # true ones plus the predictor's
    ada = pipeline_job(mp, "zb-h1", 4, n_steps=10, samples_per_step=64, replicas=4, link=link, scheme="adagp",
                       gp_fraction=0.5)
    assert ada.link_bytes["gp"] < ada.link_bytes["bp"]
    assert ada.link_bytes["bp"] == pytest.approx(four.link_bytes["bp"] + 2 * 3 * 2 * 1000.0)


def test_gp_steps_skip_the_backward_in_the_pipeline(resnet18):
    hw = Hardware(rows=16, cols=16, dataflow="ws")
    ops, out, par, plan = _inputs(resnet18, 8)
    mp = model_pipeline(ops, stages=4, hw=hw, out_bytes=out, param_bytes=par, plan=plan)
    job = pipeline_job(mp, "1f1b", 8, n_steps=100, samples_per_step=64, scheme="adagp", gp_fraction=1.0)
    assert job.steps_gp == 100 and set(job.step) == {"gp"}
    kinds = {r.kind for r in job.step["gp"].timeline}
    assert kinds <= {"F", "P", "U"}
    bp = pipeline_job(mp, "1f1b", 8, n_steps=100, samples_per_step=64)
    assert bp.time_s > job.time_s
    # forward-only steps: each device streams F and P; the slowest device sets the period
    gp = job.step["gp"]
    c = mp.gp
    work = [8 * (c.F[r] + c.P[r]) + c.U_gp[r] for r in range(4)]
    assert gp.busy == pytest.approx(work)
    assert gp.span >= max(work) * (1 - 1e-12) and gp.span <= max(work) + sum(c.F) + sum(c.comm)  # float sums
    assert step_counts(100, scheme="adagp", warmup_frac=0.2, gp_fraction=0.5) == (60, 40)


def test_bad_model_inputs_name_the_field(resnet18):
    hw = Hardware()
    ops, out, par, _ = _inputs(resnet18, 2)
    with pytest.raises(ValueError, match="hardware: one accelerator"):
        model_pipeline(ops, stages=2, hw=[hw], out_bytes=out, param_bytes=par)
    with pytest.raises(ValueError, match="out_bytes"):
        model_pipeline(ops, stages=2, hw=hw, out_bytes=out[:3], param_bytes=par)
    with pytest.raises(ValueError, match="link_gbps"):
        Link(0.0, 1.0)
    mp = model_pipeline(ops, stages=2, hw=[hw, hw.replace(rows=64)], out_bytes=out, param_bytes=par)
    with pytest.raises(ValueError, match="replicas"):
        pipeline_job(mp, "1f1b", 2, n_steps=1, samples_per_step=4, replicas=0)


def test_one_accelerator_per_stage_balances_by_each_ones_times(resnet18):
    ops, out, par, _ = _inputs(resnet18, 8)
    slow, fast = Hardware(rows=8, cols=8), Hardware(rows=32, cols=32)
    same = model_pipeline(ops, stages=2, hw=slow, out_bytes=out, param_bytes=par)
    mixed = model_pipeline(ops, stages=2, hw=[slow, fast], out_bytes=out, param_bytes=par)
    assert mixed.starts[1] < same.starts[1]  # the slow first stage gets fewer layers
    t_slow, t_fast = layer_times(ops, slow)[0], layer_times(ops, fast)[0]
    cut = mixed.starts[1]
    assert max(t_slow[:cut].sum(), t_fast[cut:].sum()) == pytest.approx(
        min(max(t_slow[:c].sum(), t_fast[c:].sum()) for c in range(1, len(t_slow))))
    assert mixed.leakage_w[0] < mixed.leakage_w[1]
