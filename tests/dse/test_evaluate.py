"""`dse evaluate`: a configuration over zoo models, what-if GP fractions, the surrogate's fraction."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest

from dse.cli import main
from dse.config.configuration import load_configuration
from dse.evaluation.evaluator import evaluate

ROOT = Path(__file__).resolve().parents[2]


def _json(capsys, *args):
    with pytest.raises(SystemExit) as e:
        main(list(args))
    assert e.value.code == 0
    return json.loads(capsys.readouterr().out)


def test_paper_configuration_json_has_the_documented_keys(capsys):
    out = _json(capsys, "evaluate", str(ROOT / "studies/adagp-paper.toml"), "--model", "resnet18",
                "--model", "mobilenet_v2", "--json")
    assert [m["model"] for m in out["models"]] == ["resnet18", "mobilenet_v2"]
    for m in out["models"]:
        assert {"model", "speedup", "speedup_same_hw", "energy_j", "energy_saving", "step_ms_bp",
                "step_ms_scheme_bp", "step_ms_gp", "predictor_params"} <= set(m)
        assert m["speedup"] > 1 and 0 < m["energy_saving"] < 1
    s = out["summary"]
    assert {"speedup_geomean", "energy_saving_total", "area_mm2", "power_w"} <= set(s)
    assert s["speedup_geomean"] == pytest.approx(math.sqrt(out["models"][0]["speedup"]
                                                           * out["models"][1]["speedup"]))
    total = sum(m["energy_j"] for m in out["models"])
    assert s["energy_saving_total"] == pytest.approx(1 - total / sum(m["energy_j_ref"] for m in out["models"]))
    assert out["surrogate"] is None  # a what-if GP fraction needs no training


def test_paper_configuration_names_every_zoo_model():
    from models.zoo import names

    cfg = load_configuration(ROOT / "studies/adagp-paper.toml")
    assert set(cfg.workload.models) == set(names())


def test_more_gp_steps_mean_more_speed(tmp_path):
    base = load_configuration(ROOT / "studies/adagp-paper.toml")
    from dataclasses import replace

    from dse.config.workload import Workload

    w = Workload.from_dict({**base.workload.to_dict(), "models": ["resnet50"]})
    speeds = [evaluate(replace(base, workload=w, gp_fraction=g))["metrics"]["speedup"] for g in (0, 0.3, 0.6)]
    assert speeds[0] < 1.0 < speeds[1] < speeds[2]  # at 0 the predictor only costs


def test_without_a_what_if_the_surrogate_sets_the_gp_fraction(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(textwrap.dedent("""
        seeds = 1
        [workload]
        models = ["resnet18"]
        dataset = "cifar10"
        batch = 64
        dataset_size = 5000
        epochs = 2
        [training]
        task = "digits"
        network = "mlp"
        epochs = 2
        gp_fraction = 0.3
    """))
    out = _json(capsys, "evaluate", str(cfg), "--json")
    sur = out["surrogate"]
    assert out["metrics"]["gp_fraction"] == sur["gp_fraction"] == pytest.approx(0.3, abs=0.02)
    for k in ("accuracy", "accuracy_drop", "predictor_gain"):
        assert out["metrics"][k] == sur[k]
    # the accuracy figures are labelled as the proxy's: its task, network and epochs
    assert out["proxy"] == sur["proxy"] == {"task": "digits", "network": "mlp", "epochs": 2,
                                            "label": "digits / mlp, 2 epochs"}
    # dse surrogate on the same file (table and JSON) and dse evaluate's text say so too
    for argv, needles in ((["surrogate", str(cfg), "--seeds", "1"], ("proxy accuracy (%)", "digits / mlp, 2 epochs")),
                          (["evaluate", str(cfg)],
                           ("proxy accuracy", "digits / mlp, 2 epochs", "not on the zoo models"))):
        with pytest.raises(SystemExit) as e:
            main(argv)
        text = capsys.readouterr().out
        assert e.value.code == 0 and all(n in text for n in needles), (argv, text)


# ---------------------------------------------------------------------------------------------------------
# each scheme costed by its own ops (a review found every non-BP scheme costed as ADA-GP)

def _scheme_cfg(scheme: str, **training):
    """ResNet-18/CIFAR-10 at batch 8 on a 32x32 array with room for every activation (no stash traffic)
    and no predictor unit (everything in series: the step is the sum of its ops)."""
    from accel import Hardware
    from dse.config.configuration import Configuration
    from dse.config.workload import Workload
    from models.surrogate import SurrogateConfig

    w = Workload.from_dict({"models": ["resnet18"], "dataset": "cifar10", "batch": 8, "dataset_size": 800,
                            "epochs": 1})
    hw = Hardware(rows=32, cols=32, dataflow="ws", ifmap_kb=65536.0, filter_kb=256.0, ofmap_kb=256.0,
                  bandwidth_gbps=25.6, vector_width=32)
    return Configuration(workload=w, training=SurrogateConfig(scheme=scheme, **training), hardware=hw,
                         reference=hw, gp_fraction=0.5)


def _by_hand_gp_ms(cfg, extra_gemms, extra_vec, wgrad_layers, update_layers):
    """A GP step's milliseconds computed op by op with the accelerator's own GEMM and vector costs: the
    network's forward, the given extra GEMMs (M, K, N) and vector elements, the weight-gradient GEMMs of
    ``wgrad_layers`` and the updates of ``update_layers`` (taken from the plain training ops)."""
    import numpy as np

    from accel import Im2col, gemm_cost, vector_cost
    from models.zoo import build

    net = build("resnet18", dataset="cifar10")
    ops = net.training_ops(cfg.workload.batch)
    hw = cfg.hardware
    g = (ops.phase == "fwd") | ((ops.phase == "wgrad") & np.isin(ops.layer, list(wgrad_layers)))
    M = np.concatenate([ops.M[g], [e[0] for e in extra_gemms]])
    K = np.concatenate([ops.K[g], [e[1] for e in extra_gemms]])
    N = np.concatenate([ops.N[g], [e[2] for e in extra_gemms]])
    R = np.concatenate([ops.repeat[g], np.ones(len(extra_gemms), dtype=np.int64)])
    # the network's convolutions fetch their raw input; the extra (module) GEMMs are plain matrices
    geo = Im2col.from_table(np.concatenate([ops.im2col[g], np.zeros((len(extra_gemms), 11), dtype=np.int64)]))
    v = (ops.phase == "fwd_vec") | ((ops.phase == "update") & np.isin(ops.layer, list(update_layers)))
    elems = np.concatenate([ops.vec_elems[v], extra_vec])
    cycles = gemm_cost(M, K, N, R, hw=hw, include_leakage=False, im2col=geo).total_cycles.sum() \
        + vector_cost(elems, hw=hw, include_leakage=False).total_cycles.sum()
    return net, cycles / (hw.clock_ghz * 1e9) * 1e3


def test_dni_gp_step_costs_its_modules_not_adagps_predictor():
    """cDNI as the surrogate trains it: per hidden layer a dense module from the flattened output h and the
    one-hot label to dL/dh (a GEMM (batch, |h| + classes, |h|)), the activation's derivative, then the
    layer's weight-gradient GEMM; the classifier takes its true gradient."""
    from dse.evaluation.evaluator import evaluate_hardware

    cfg = _scheme_cfg("dni")
    b = cfg.workload.batch
    from models.zoo import build

    net = build("resnet18", dataset="cifar10")
    weighted = [i for i, l in enumerate(net.layers) if l.kind in ("conv", "linear") and l.params]
    hidden = weighted[:-1]
    sizes = [math.prod(net.layers[i].out) for i in hidden]
    gemms = [(b, d + 10, d) for d in sizes]
    vec = [3 * b * d for d in sizes] + [3 * b * 10]
    _, expected = _by_hand_gp_ms(cfg, gemms, vec, weighted, weighted)
    row = evaluate_hardware(cfg, 0.5)["models"][0]
    assert row["step_ms_gp"] == pytest.approx(expected, rel=1e-9)
    assert row["predictor_params"] == sum((d + 10) * d + d for d in sizes)
    ada = evaluate_hardware(_scheme_cfg("adagp"), 0.5)["models"][0]
    assert row["step_ms_gp"] > 10 * ada["step_ms_gp"]  # dense modules over 32x32 maps: far from ADA-GP's
    # dni slows training down; ADA-GP's small predictor breaks about even here (0.998x at batch 8, where its
    # training is a third of a BP step): far apart either way
    assert row["speedup_same_hw"] < 1 and row["speedup_same_hw"] < 0.5 * ada["speedup_same_hw"]


@pytest.mark.parametrize("scheme", ["null", "null_momentum", "truncated"])
def test_controls_cost_no_predictor(scheme):
    import numpy as np

    from dse.evaluation.evaluator import evaluate_hardware
    from models.zoo import build

    cfg = _scheme_cfg(scheme)
    net = build("resnet18", dataset="cifar10")
    weighted = [i for i, l in enumerate(net.layers) if l.kind in ("conv", "linear") and l.params]
    updated = {"null": weighted[-1:], "null_momentum": weighted, "truncated": weighted[-2:]}[scheme]
    row = evaluate_hardware(cfg, 0.5)["models"][0]
    if scheme == "truncated":
        # backprop one layer deep: the classifier's input gradient, the vector backward between the two
        # layers (pool, relu, residual add, norm), two weight gradients, two updates
        ops = net.training_ops(cfg.workload.batch)
        fc, below = weighted[-1], weighted[-2]
        extra = [(ops.M[i], ops.K[i], ops.N[i]) for i in np.flatnonzero((ops.phase == "igrad") & (ops.layer == fc))]
        between = (ops.phase == "bwd_vec") & (ops.layer > below) & (ops.layer < fc)
        vec = list(ops.vec_elems[between]) + [3 * cfg.workload.batch * 10]
        _, expected = _by_hand_gp_ms(cfg, extra, vec, updated, updated)
    else:
        _, expected = _by_hand_gp_ms(cfg, [], [3 * cfg.workload.batch * 10], weighted[-1:], updated)
    assert row["step_ms_gp"] == pytest.approx(expected, rel=1e-9)
    assert row["predictor_params"] == 0 and row["step_ms_scheme_bp"] == pytest.approx(row["step_ms_bp"])


@pytest.mark.parametrize("scheme", ["dni", "adagp", "bp"])
def test_the_bp_phase_columns_describe_one_step(scheme):
    """step_ms_scheme_bp and dram_gb_per_step_scheme_bp are the scheme's BP-phase step (as over several accelerators);
    step_ms_bp and dram_gb_per_step_bp plain BP's on the same accelerator (the key dram_gb_per_step_bp held the
    scheme's step beside the plain step_ms_bp, so a script pairing the two mixed two steps)."""
    from dse.evaluation.evaluator import evaluate_hardware, model_cost

    cfg = _scheme_cfg(scheme)
    (row,) = evaluate_hardware(cfg, 0.5)["models"]
    steps = model_cost(cfg, "resnet18", cfg.hardware, 0.5, cfg.hardware.word_bytes).steps
    assert row["step_ms_scheme_bp"] == pytest.approx(steps.scheme_bp.time_s * 1e3, rel=1e-12)
    assert row["dram_gb_per_step_scheme_bp"] == pytest.approx(steps.scheme_bp.dram_bytes / 1e9, rel=1e-12)
    assert row["step_ms_bp"] == pytest.approx(steps.bp.time_s * 1e3, rel=1e-12)
    assert row["dram_gb_per_step_bp"] == pytest.approx(steps.bp.dram_bytes / 1e9, rel=1e-12)
    if scheme == "dni":  # its modules' traffic: far from plain BP's
        assert steps.scheme_bp.dram_bytes > 10 * steps.bp.dram_bytes


def test_efb_gp_step_costs_feedback_weight_gradients_and_the_stash():
    """Error feedback: per hidden layer the factored feedback GEMMs (batch, classes, r) and (batch, r, |h|),
    the derivative mask, the layer's weight-gradient GEMM; the error once; no input-gradient GEMM. With the
    stash on chip (first check) the step is the sum of those ops; on a small chip it keeps BP's whole
    activation stash in DRAM (second check)."""
    import dataclasses

    import numpy as np

    from accel.schedule import step_costs
    from dse.evaluation.evaluator import evaluate_hardware
    from models.schemes import scheme_plan
    from models.zoo import build

    r = 3
    cfg = _scheme_cfg("efb", efb_rank=r)
    b = cfg.workload.batch
    net = build("resnet18", dataset="cifar10")
    weighted = [i for i, l in enumerate(net.layers) if l.kind in ("conv", "linear") and l.params]
    sizes = [math.prod(net.layers[i].out) for i in weighted[:-1]]
    gemms = [g for d in sizes for g in ((b, 10, r), (b, r, d))]
    vec = [3 * b * d for d in sizes] + [3 * b * 10, 3 * b * 10]  # masks, the error, the classifier's dlogits
    _, expected = _by_hand_gp_ms(cfg, gemms, vec, weighted, weighted)
    row = evaluate_hardware(cfg, 0.5)["models"][0]
    assert row["step_ms_gp"] == pytest.approx(expected, rel=1e-9)
    assert row["predictor_params"] == sum(10 * r + r * d for d in sizes)
    ada = evaluate_hardware(_scheme_cfg("adagp"), 0.5)["models"][0]
    # (at batch 8 the refit after every BP step, independent of the batch, costs more than GP steps save)
    assert row["speedup_same_hw"] < ada["speedup_same_hw"]
    # on a small chip: BP's off-chip stash (the layers before the last ones whose summed stash fits the
    # chip's SRAM), written in the forward and read back
    plan = scheme_plan(cfg.training, net, b)
    ops = net.training_ops(b)
    small = cfg.hardware.replace(ifmap_kb=64.0, filter_kb=64.0, ofmap_kb=64.0)
    s = step_costs(ops, plan=plan, hw=small)
    no_stash = step_costs(ops, plan=dataclasses.replace(plan, gp_stash=()), hw=small)
    per_layer = np.bincount(ops.layer, weights=ops.stash_bytes, minlength=len(net.layers))
    cap = (small.ifmap_kb + small.filter_kb + small.ofmap_kb) * 1024
    off = per_layer[np.cumsum(per_layer[::-1])[::-1] > cap].sum()
    assert off > 0 and s.scheme_gp.parts_s["stash"] > 0
    assert s.scheme_gp.dram_bytes - no_stash.scheme_gp.dram_bytes == pytest.approx(2 * off, rel=1e-9)


@pytest.mark.parametrize("models,dataflow,gpf", [(("resnet18",), "ws", 0.3), (("resnet18", "mobilenet_v2"), "os", 0.0),
                                                  (("vgg13",), "is", 0.6)])
def test_the_scalar_and_the_vectorized_metrics_agree(models, dataflow, gpf):
    """evaluate_hardware (one Hardware, accel's scalar path) against hardware_metrics (a HardwareArray of
    several accelerators, accel's vectorized path): every per-hardware metric of the registry, per point."""
    from dataclasses import replace

    from accel import Hardware, HardwareArray
    from dse.config.configuration import Configuration
    from dse.config.workload import Workload
    from dse.evaluation import metrics as registry
    from dse.evaluation.evaluator import evaluate_hardware, hardware_metrics

    base = Configuration(workload=Workload(models=models, dataset="cifar10", batch=64))
    hws = [Hardware.from_dict({"rows": r, "cols": c, "dataflow": dataflow, "bandwidth_gbps": bw, "word_bytes": wb,
                               "pred_rows": p, "pred_cols": p, "pred_kb": 24.0 if p else 0.0})
           for r, c, bw, p, wb in [(8, 8, 6.4, 0, 2), (32, 16, 25.6, 8, 2), (64, 64, 51.2, 0, 4),
                                   (16, 128, 12.8, 8, 4)]]
    vec = hardware_metrics(base, HardwareArray.from_list(hws), gpf)
    assert set(vec) == set(registry.per_hardware())
    for i, hw in enumerate(hws):
        scalar = evaluate_hardware(replace(base, hardware=hw), gpf)["metrics"]
        assert set(scalar) == set(vec)
        for m in vec:
            assert scalar[m] == pytest.approx(float(vec[m][i]), rel=1e-12), (m, i)


def test_every_metric_is_declared_once_and_read_from_the_registry():
    from dse.evaluation import metrics as registry
    from dse.evaluation.evaluator import evaluate

    cfg = load_configuration(ROOT / "studies/adagp-paper.toml")
    out = evaluate(cfg)
    # a what-if GP fraction: no surrogate, so exactly the metrics whose inputs exist
    assert set(out["metrics"]) == {m.name for m in registry.all_metrics() if "surrogate" not in m.inputs}
    for m in registry.all_metrics():
        assert m.direction in ("maximize", "minimize") and m.unit and m.description
        assert (m.hv_reference is None) != (m.hv_baseline_factor is None)
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(registry.get("speedup"))
    # a baseline reference reads the reference accelerator's value: a metric that is not per hardware has none
    # (it used to register, and every run then failed with a bare KeyError of its name)
    with pytest.raises(ValueError, match="metric edp: hv_baseline_factor needs per_hardware=True"):
        registry.Metric("edp", "minimize", "J*s", "energy x time", lambda q: q["energy_j"] * q["time_s"],
                        ("energy_j", "time_s"), hv_baseline_factor=2.0)


def test_a_study_runs_only_the_surrogate_controls_its_metrics_need(monkeypatch, tmp_path):
    import models.surrogate.train as train
    from dse.config.configuration import Configuration
    from dse.evaluation.evaluator import evaluate
    from models.surrogate import SurrogateConfig

    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))
    kinds = []
    real = train.train_run

    def counting(cfg, kind, seed, replay=None):
        kinds.append(kind)
        return real(cfg, kind, seed, replay=replay)

    monkeypatch.setattr(train, "train_run", counting)
    cfg = Configuration(training=SurrogateConfig(task="digits", network="mlp", epochs=1), seeds=1)
    out = evaluate(cfg, metrics=["accuracy_drop", "speedup"])
    assert sorted(kinds) == ["adagp", "bp"]
    assert "predictor_gain" not in out["metrics"] and "accuracy_null" not in out["surrogate"]
    assert out["surrogate"]["controls"] == [] and "accuracy_drop" in out["metrics"]
    kinds.clear()
    out = evaluate(cfg, metrics=["predictor_gain", "speedup"])
    assert kinds == ["null"]  # BP and the scheme's run come from the cache
    s = out["surrogate"]
    assert out["metrics"]["predictor_gain"] == pytest.approx(s["accuracy"] - s["accuracy_null"])
    kinds.clear()
    full = evaluate(cfg)  # dse evaluate: every control
    assert sorted(kinds) == ["null_momentum", "truncated"]
    assert full["metrics"]["predictor_gain"] == out["metrics"]["predictor_gain"]
    assert full["metrics"]["accuracy_drop"] == evaluate(cfg, metrics=["accuracy_drop"])["metrics"]["accuracy_drop"]


def test_each_proxy_tasks_figures_take_their_metrics_unit_and_direction():
    """Several tasks: ``<task>_accuracy_drop`` ... are recorded beside the metrics, with the unit and direction
    of the metric they are one task's value of; one task adds none."""
    from dse.evaluation import metrics as registry
    from dse.results.views import natural_direction, unit_of
    from models.surrogate.config import SurrogateConfig

    assert registry.like("fashion_accuracy_drop").name == "accuracy_drop"
    assert registry.like("mnist1d_accuracy_bp").name == "accuracy" and unit_of("mnist1d_accuracy_bp") == "%"
    assert registry.like("fashion_predictor_gain").name == "predictor_gain"
    assert registry.like("speedup") is registry.get("speedup")
    assert registry.like("rank_agreement_mnist1d_fashion") is None and registry.like("_accuracy") is None
    assert natural_direction("fashion_accuracy_drop") == "minimize"
    assert natural_direction("digits_accuracy") == "maximize"
    sur = {"tasks": "mnist1d,fashion", "accuracy": 50.0, "mnist1d_accuracy_drop": 2.0, "fashion_accuracy_drop": 1.0,
           "rank_agreement_mnist1d_fashion": 0.5, "label": "x", "diverged": False}
    assert registry.task_figures(sur) == {"mnist1d_accuracy_drop": 2.0, "fashion_accuracy_drop": 1.0,
                                          "rank_agreement_mnist1d_fashion": 0.5}
    assert registry.task_figures({"accuracy": 50.0, "accuracy_drop": 1.0}) == {}
    two = SurrogateConfig(task="mnist1d", tasks=("mnist1d", "fashion"))
    assert two.proxy == "; ".join(c.proxy for c in two.task_configs()) and "fashion" in two.proxy
    assert SurrogateConfig(task="mnist1d").proxy.startswith("mnist1d / ")


def test_surrogate_on_a_study_file_says_it_trains_the_base_setting(study_file, capsys):
    """`dse surrogate STUDY.toml` trained the base [training] table and ignored the [space] without a word."""
    with pytest.raises(SystemExit) as e:
        main(["surrogate", str(study_file), "--seeds", "1"])
    err = capsys.readouterr().err
    assert e.value.code == 0 and "is a study file: dse surrogate trains its base [training] setting" in err


def test_evaluate_of_plain_bp_says_a_what_if_gp_fraction_does_not_apply(tmp_path, capsys):
    """scheme bp with [schedule] gp_fraction 0.5: the table showed GP fraction 0 and the line under it still
    said the fraction came from the what-if."""
    cfg = tmp_path / "bp.toml"
    cfg.write_text('[workload]\nmodels = ["resnet18"]\ndataset = "cifar10"\nbatch = 64\ndataset_size = 1000\n'
                   'epochs = 1\n[training]\nscheme = "bp"\n[schedule]\ngp_fraction = 0.5\n')
    with pytest.raises(SystemExit) as e:
        main(["evaluate", str(cfg)])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "the [schedule] gp_fraction 0.5 does not apply" in out
    assert "from the what-if" not in out


def test_a_named_dataset_without_a_size_gets_its_own_training_set_size():
    """Found by probing: `dataset = "cifar10"` without `dataset_size` kept ImageNet's 1,281,167 samples, so the
    job's time and energy were 25.6x those of a CIFAR-10 job (the speed-up unchanged)."""
    from dse.config.workload import DATASET_SIZES, Workload

    assert DATASET_SIZES == {"imagenet": 1_281_167, "cifar10": 50_000, "cifar100": 50_000}
    for dataset, size in (("cifar10", 50_000), ("cifar100", 50_000), ("imagenet", 1_281_167), (None, 1_281_167)):
        d = {"models": ["resnet18"], "batch": 128, "epochs": 90, **({"dataset": dataset} if dataset else {})}
        w = Workload.from_dict(d)
        assert w.dataset_size == size and w.steps == -(-size // 128) * 90
        assert Workload.from_dict({**d, "dataset_size": 1000}).dataset_size == 1000  # given: kept
