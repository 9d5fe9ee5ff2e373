"""The [parallel] table in configurations and studies, and `dse pipeline`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest

from dse.config.configuration import Configuration
from dse.config.parallel import ParallelConfig
from dse.errors import UsageError
from dse.evaluation.evaluator import evaluate, evaluate_hardware
from dse.search.studyfile import load_study
from studyfiles import FAST_STUDY, write_study

BASE = {"workload": {"models": ["resnet18"], "dataset": "cifar10", "batch": 64, "dataset_size": 6400,
                     "epochs": 1},
        "hardware": {"rows": 16, "cols": 16, "dataflow": "ws"}, "reference": {"rows": 16, "cols": 16}}


def _cfg(**parallel) -> Configuration:
    return Configuration.from_dict({**BASE, "parallel": parallel})


def test_parallel_table_round_trips_and_one_stage_is_one_device():
    cfg = _cfg(stages=4, microbatches=8, schedule="zb-h1", link_gbps=25.0, replicas=2)
    assert Configuration.from_dict(cfg.to_dict()) == cfg
    one = evaluate_hardware(Configuration.from_dict(BASE), 0.3)
    same = evaluate_hardware(_cfg(stages=1, microbatches=1), 0.3)
    for k in ("speedup_geomean", "speedup_same_hw_geomean", "energy_j", "throughput"):
        assert same["summary"][k] == pytest.approx(one["summary"][k], rel=1e-9), k
    assert one["summary"]["bubble_rate"] == 0.0 and one["summary"]["devices"] == 1


def test_a_pipeline_job_feeds_speedup_energy_and_the_new_metrics():
    one = evaluate_hardware(Configuration.from_dict(BASE), 0.3)["summary"]
    rows = {}
    for sch in ("1f1b", "zb-h2"):
        rows[sch] = evaluate_hardware(_cfg(stages=4, microbatches=8, schedule=sch), 0.3)
    a, b = rows["1f1b"]["summary"], rows["zb-h2"]["summary"]
    assert a["devices"] == 4 and a["speedup_geomean"] > one["speedup_geomean"]
    assert b["throughput"] > a["throughput"] and b["bubble_rate"] < a["bubble_rate"]
    assert b["peak_act_bytes"] > a["peak_act_bytes"]  # ZB-H2 holds up to 2p - 1 micro-batches
    m = rows["1f1b"]["models"][0]
    assert m["energy_j"] == pytest.approx(m["energy_j_dynamic"] + m["energy_j_leakage"] + m["energy_j_link"])
    assert m["energy_j_link"] > 0 and m["throughput"] == pytest.approx(6400 / m["time_s"])
    out = evaluate(replace(_cfg(stages=2, microbatches=4), gp_fraction=0.5))
    assert {"throughput", "bubble_rate", "peak_act_bytes"} <= set(out["metrics"])


@pytest.mark.parametrize("table,match", [
    ({"stages": 0}, r"parallel\.stages: must be >= 1|parallel\.stages: must be an integer >= 1"),
    ({"schedule": "pipedream"}, r"parallel\.schedule: .*choose one of gpipe"),
    ({"chunks": 2, "schedule": "1f1b"}, r"parallel\.chunks: 1f1b runs one model chunk"),
    ({"chunks": 2, "schedule": "1f1b-interleaved", "stages": 4, "microbatches": 6}, r"parallel\.microbatches"),
    ({"microbatches": 3}, r"parallel\.microbatches: batch 64 does not split"),
    ({"link_gbps": 0}, r"parallel\.link_gbps"),
    # found by probing: on one device its two chunks paid link energy for messages to their own device
    ({"chunks": 2, "schedule": "1f1b-interleaved", "stages": 1, "microbatches": 4},
     r"parallel\.stages: 1f1b-interleaved interleaves model chunks across devices and needs at least 2 stages"),
    ({"bogus": 1}, r"parallel\.bogus: unknown key"),
])
def test_bad_parallel_tables_are_one_line_errors(table, match):
    with pytest.raises(UsageError, match=match):
        _cfg(**table)


def test_parallel_knobs_are_searched_like_any_other(tmp_path):
    text = FAST_STUDY.replace("trials = 12", "trials = 4") + textwrap.dedent("""
        [parallel]
        stages = 2
        microbatches = 4

        [space.parallel]
        stages = [1, 2, 4]
        schedule = ["1f1b", "zb-h1", "zb-h2"]
        """)
    text = text.replace('metric = "area_mm2"\n\n[[constraints]]', 'metric = "throughput"\n\n[[constraints]]')
    spec = load_study(write_study(tmp_path, text))
    base = {"hardware.rows": 8, "hardware.cols": 8, "hardware.bandwidth_gbps": 6.4, "training.pred_width": 8,
            "hardware.predictor_unit": "pred_cols=0,pred_kb=0.0,pred_rows=0"}
    cfg = spec.configuration({**base, "parallel.stages": 4, "parallel.schedule": "zb-h2"})
    assert cfg.parallel == ParallelConfig(stages=4, microbatches=4, schedule="zb-h2")
    from dse.search.runner import run_study as run
    from dse.search.study import open_study

    run(spec)
    done = [t for t in open_study(spec, None, create=False).get_trials() if t.state.name == "COMPLETE"]
    assert len(done) == 4
    seen = {(t.params["parallel.stages"], t.params["parallel.schedule"]) for t in done}
    assert all(t.user_attrs["config"]["parallel"]["stages"] == t.params["parallel.stages"] for t in done)
    assert all(t.user_attrs["metrics"]["throughput"] > 0 for t in done) and seen


def test_show_plot_and_report_read_a_study_over_several_accelerators(tmp_path):
    """A job over several accelerators breaks its energy into dynamic, leakage and link, not one accelerator's
    mac ... leakage: `dse show` (with --layers), `dse plot` and `dse report` show those (a KeyError before)."""
    from dse.figures.charts import energy_breakdown
    from dse.search.runner import run_study as run

    text = FAST_STUDY.replace("trials = 12", "trials = 2") + "\n[parallel]\nstages = 2\nmicrobatches = 4\n"
    f = write_study(tmp_path, text)
    spec = load_study(f)
    assert run(spec)["complete"] == 2
    code, out, err = _dse("show", str(f), "0", "--layers")
    assert code == 0, err
    head = out.split("per model", 1)[1]
    assert all(k in head for k in ("dynamic", "leakage", "link")) and "interpe" not in head
    for cmd in (["plot", "--out", str(tmp_path / "plots")], ["report", "--out", str(tmp_path / "r.html")]):
        code, out, err = _dse(cmd[0], str(f), *cmd[1:])
        assert code == 0, err
    d = json.loads(_dse("show", str(f), "0", "--format", "json")[1])
    rows = d["models"]
    from dse.evaluation.evaluator import energy_components

    assert energy_components(rows) == ["dynamic", "leakage", "link"]
    fig = energy_breakdown(spec, [("trial 0", (d["config"], d["metrics"]["gp_fraction"]))])
    ax = fig.axes[0]
    heights = {}
    for bar in ax.patches:  # the stacked bars: each bar's components add up to the job's energy
        x = round(bar.get_x() + bar.get_width() / 2)
        heights[x] = heights.get(x, 0.0) + bar.get_height()
    assert heights[1] == pytest.approx(sum(r["energy_j"] for r in rows), rel=1e-9)


def test_space_parallel_needs_the_table_and_hybrid_refuses_it(tmp_path):
    text = FAST_STUDY + "\n[space.parallel]\nstages = [1, 2]\n"
    with pytest.raises(UsageError, match=r"space\.parallel: add a \[parallel\] table"):
        load_study(write_study(tmp_path, text))
    text = FAST_STUDY.replace('name = "tiny"', 'name = "tiny"\nstrategy = "hybrid"') + "\n[parallel]\nstages = 2\n"
    with pytest.raises(UsageError, match=r"study\.strategy: the hybrid strategy"):
        load_study(write_study(tmp_path, text))
    text = FAST_STUDY + "\n[parallel]\nstages = 2\n[space.parallel]\nschedule = ['1f1b', 'zb-h3']\n"
    with pytest.raises(UsageError, match=r"space\.parallel\.schedule: value 'zb-h3' is not allowed"):
        load_study(write_study(tmp_path, text))
    # a value valid only with another searched knob's value: each trial's combination is checked, not the file
    # (interleaved 1F1B needs chunks >= 2, which the base's chunks = 1 is not)
    both = ("\n[parallel]\nstages = 2\nmicrobatches = 4\n[space.parallel]\nschedule = ['1f1b', '1f1b-interleaved']\n"
            "chunks = [1, 2]\n")
    assert load_study(write_study(tmp_path, FAST_STUDY + both)).space.names("parallel") == ["parallel.schedule",
                                                                                           "parallel.chunks"]
    with pytest.raises(UsageError, match=r"space\.parallel\.schedule: value '1f1b-interleaved' is not allowed"):
        load_study(write_study(tmp_path, FAST_STUDY + both.replace("chunks = [1, 2]", "chunks = [1]")))
    # valid only with two other knobs' values (stages 2 and chunks 2, on a base of one stage): found by review,
    # once interleaving on one stage was refused, a space of stages [1, 2] was refused at load
    three = both.replace("stages = 2", "stages = 1") + "stages = [1, 2]\n"
    spec = load_study(write_study(tmp_path, FAST_STUDY + three))
    assert spec.space.names("parallel") == ["parallel.schedule", "parallel.chunks", "parallel.stages"]
    with pytest.raises(ValueError, match="stages: 1f1b-interleaved interleaves model chunks across devices"):
        ParallelConfig(**{**spec.base.parallel.to_dict(), "schedule": "1f1b-interleaved", "chunks": 2})


def _dse(*args):
    import contextlib
    import io

    from dse.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def test_cli_pipeline_explicit_times_json_gantt_and_trace(tmp_path):
    code, out, _ = _dse("pipeline", "--stages", "8", "--microbatches", "24", "--tf", "18.522", "--tb", "18.086",
                        "--tw", "9.337", "--comm", "0.601", "--schedule", "1f1b,zb-h1,zb-h2", "--json")
    assert code in (0, None)
    rates = {r["schedule"]: r["bp_step"]["bubble_rate"] for r in json.loads(out)}
    assert rates == pytest.approx({"1f1b": 0.2431, "zb-h1": 0.1585, "zb-h2": 0.1083}, abs=5e-4)
    trace = tmp_path / "t.json"
    code, out, _ = _dse("pipeline", "-p", "4", "-m", "8", "--tf", "1", "--tb", "1", "--tw", "1", "-s", "zb-h1",
                        "--gp-fraction", "0.5", "--tp", "0.25", "--trace", str(trace), "--width", "40")
    assert code in (0, None)
    assert "dev 3 |" in out and "GP step" in out and "mix_" in out and "speedup" in out  # a wrapped header
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == 4 * 8 * 3


def test_cli_pipeline_from_a_model():
    code, out, _ = _dse("pipeline", "--model", "resnet18", "--dataset", "cifar10", "--stages", "2",
                        "--microbatches", "4", "--batch", "32", "--rows", "16", "--cols", "16", "--json",
                        "--gp-fraction", "0.5")
    assert code in (0, None)
    r = json.loads(out)
    assert r["unit"] == "ms" and len(r["stage_starts"]) == 2 and r["throughput"] > 0
    assert r["gp_step"]["span"] < r["bp_step"]["span"]
    # per-stage times are in the JSON's unit (ms here): no key says seconds
    step = r["bp_step"]
    assert not [k for k in step if k.endswith("_s")]
    assert sum(step["busy"]) + sum(step["idle"]) == pytest.approx(step["stages"] * step["span"])


@pytest.mark.parametrize("args,match", [
    (["--tf", "1", "--tb", "1"], "--tf/--tb/--tw: give all three"),
    (["--tf", "1", "--tb", "1", "--tw", "1", "-s", "zb-h9"], "--schedule: 'zb-h9' is not a schedule"),
    (["--tf", "-1", "--tb", "1", "--tw", "1"], "--tf: must be a finite time"),
    (["--tf", "1", "--tb", "1", "--tw", "1", "--gp-fraction", "2"], "--gp-fraction: must be in"),
    (["--tf", "1", "--tb", "1", "--tw", "1", "-m", "0"], "--microbatches: must be an integer"),
    (["--model", "resnet18", "--tf", "1"], "--tf: give either --model"),
    (["--model", "resnet18", "--dataset", "cifar10", "-m", "3", "--batch", "32"], "--microbatches: batch 32"),
    (["--model", "nosuch"], "unknown model 'nosuch'"),
    (["--tf", "nan", "--tb", "1", "--tw", "1"], "--tf: must be a finite number, got nan"),
    (["--tf", "1", "--tb", "1", "--tw", "1", "-p", "1000", "-m", "100000"], "--microbatches: 1000 stages"),
    (["--tf", "1", "--tb", "1", "--tw", "1", "-p", "1", "-v", "2", "-s", "1f1b-interleaved", "-m", "4"],
     "--stages: model chunks interleave across devices and need at least 2 stages"),
    # an accelerator's option with explicit times (once silently ignored), the predictor's work without GP steps
    (["--tf", "1", "--tb", "1", "--tw", "1", "--rows", "64"], "--rows: applies to --model only"),
    (["--tf", "1", "--tb", "1", "--tw", "1", "--replicas", "2"], "--replicas: applies to --model only"),
    (["--tf", "1", "--tb", "1", "--tw", "1", "--batch", "64"], "--batch: applies to --model only"),
    (["--tf", "1", "--tb", "1", "--tw", "1", "--tp", "0.5"], "--tp: the predictor's work in a GP step"),
])
def test_cli_pipeline_bad_input_is_one_line_exit_2(args, match):
    code, out, err = _dse("pipeline", *args)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and match in err and "Traceback" not in err


def test_cli_pipeline_bad_input_in_a_subprocess():
    r = subprocess.run([sys.executable, "-m", "dse.cli", "pipeline", "--tf", "1"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("dse: error: --tf/--tb/--tw")


def test_the_figures_reference_has_every_metric_the_model_gives_it(tmp_path):
    """The plots' reference star listed eight metrics by hand: a study on throughput, bubble rate or peak
    activations drew no reference at all."""
    from dse.figures.charts import reference_configuration, reference_metrics

    spec = load_study(write_study(tmp_path, FAST_STUDY))
    ref = reference_metrics(spec)
    m = evaluate_hardware(reference_configuration(spec), 0.0)["metrics"]
    assert {"throughput", "bubble_rate", "peak_act_bytes"} <= set(m) <= set(ref)
    assert ref["throughput"] == m["throughput"] > 0 and ref["speedup"] == 1.0 and ref["accuracy_drop"] == 0.0


def test_the_figures_reference_is_the_one_every_metric_is_against(tmp_path):
    """Found by probing: over several accelerators the figures drew "reference, plain BP" as a pipeline of
    reference accelerators (64,120 J), while speed-up, energy saving and the hypervolume reference are against
    one reference accelerator (74,133 J): a trial that saves 10.6% was drawn above the reference's energy."""
    from dse.figures.charts import reference_metrics

    spec = load_study(write_study(tmp_path, FAST_STUDY + "\n[parallel]\nstages = 2\nmicrobatches = 4\n"))
    m = evaluate_hardware(spec.base, 0.0)["metrics"]
    ref = reference_metrics(spec)
    assert ref["energy_j"] == pytest.approx(m["energy_j"] / (1 - m["energy_saving"]), rel=1e-9)
    plain = load_study(write_study(tmp_path, FAST_STUDY.replace('name = "tiny"', 'name = "one"'), name="one.toml"))
    assert reference_metrics(plain) == ref  # one device either way
    import matplotlib.pyplot as plt

    from dse.figures.charts import energy_breakdown

    fig = energy_breakdown(spec, [("a trial", (spec.base.to_dict(), 0.0))])
    try:  # the reference's bar in the components of the others (it showed mac, rf, ..., dram beside dynamic)
        labels = fig.axes[0].get_legend_handles_labels()[1]
        assert set(labels) <= {"dynamic", "leakage", "link"} and "dynamic" in labels, labels
    finally:
        plt.close(fig)
