"""Accuracy you can trust (issue 22, the surrogate's half): task defaults, the local heads' step, diverged runs
flagged, and ``evaluate(jobs=N)`` giving the figures of one process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from models.schemes.local import head_lr
from models.surrogate import SurrogateConfig, evaluate
from models.surrogate.config import TASK_DEFAULTS
from models.surrogate.evaluation import SurrogateDiverged, SurrogateResult
from models.surrogate.layers import softmax_cross_entropy
from models.surrogate.train import at_chance

ROOT = Path(__file__).resolve().parents[2]
FAST = dict(task="digits", epochs=1, batch_size=64)


# -- task defaults -----------------------------------------------------------------------------------------


def test_naming_the_task_alone_gives_its_tuned_proxy():
    fashion = SurrogateConfig.from_dict({"task": "fashion"})
    assert fashion == SurrogateConfig.from_toml(ROOT / "studies" / "surrogate-fashion.toml")
    assert (fashion.network, fashion.width, fashion.epochs, fashion.batch_size, fashion.lr) == ("resnet", 8, 8,
                                                                                                  128, 0.2)
    assert SurrogateConfig.from_dict({"task": "mnist1d"}) == SurrogateConfig()  # the class's defaults are MNIST-1D's


def test_an_explicit_knob_wins_over_the_task_default():
    cfg = SurrogateConfig.from_dict({"task": "fashion", "epochs": 4, "network": "mlp"})
    assert (cfg.epochs, cfg.network, cfg.lr) == (4, "mlp", 0.2)
    with pytest.raises(ValueError, match="network: 'resnet' or 'mlp' for the image task 'fashion'"):
        SurrogateConfig.from_dict({"task": "fashion", "network": "cnn"})


def test_replace_moves_the_knobs_at_the_old_tasks_defaults():
    moved = SurrogateConfig(lr=0.1).replace(task="fashion")
    assert (moved.network, moved.epochs, moved.lr) == ("resnet", 8, 0.1)  # lr was given, not a default
    assert moved.replace(task="mnist1d") == SurrogateConfig(lr=0.1)
    assert set(TASK_DEFAULTS) == {"mnist1d", "digits", "fashion"}


def test_dse_surrogate_task_option_runs_the_tasks_proxy(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from dse.cli.app import app

    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))
    toml = tmp_path / "t.toml"
    toml.write_text('[training]\nepochs = 1\nscheme = "bp"\n')
    out = CliRunner().invoke(app, ["surrogate", str(toml), "--task", "digits", "--seeds", "1", "--json",
                                   "--jobs", "1"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["proxy"]["label"] == "digits / cnn, 1 epochs"


# -- the local heads' step ---------------------------------------------------------------------------------


def test_head_lr_is_the_run_lr_below_the_heads_stability_limit_and_capped_above():
    small = np.full((8, 4), 0.1, np.float32)  # m = 1.04: 4 * 1.9 / 1.04 > 0.2
    assert head_lr(0.2, 0.9, small) == 0.2
    big = np.full((8, 100), 3.0, np.float32)  # m = 901
    assert head_lr(0.2, 0.9, big) == pytest.approx(4 * 1.9 / 901)


def _head_losses(step_of, steps=60):
    """Heavy-ball SGD (momentum 0.9) on a softmax head over features dominated by a large shared offset."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 128)
    x = (30.0 + rng.standard_normal((128, 64)) + 0.5 * np.eye(10)[y] @ rng.standard_normal((10, 64))).astype(
        np.float32)
    A, c = np.zeros((64, 10), np.float32), np.zeros(10, np.float32)
    va, vc = np.zeros_like(A), np.zeros_like(c)
    losses = []
    for _ in range(steps):
        loss, d = softmax_cross_entropy(x @ A + c, y)
        losses.append(loss)
        va = 0.9 * va + x.T @ d
        vc = 0.9 * vc + d.sum(0)
        lr = step_of(x)
        A -= lr * va
        c -= lr * vc
    return losses


def test_a_head_at_the_capped_step_learns_where_the_run_lr_diverges():
    capped = _head_losses(lambda x: head_lr(0.2, 0.9, x))
    raw = _head_losses(lambda x: 0.2)
    assert capped[-1] < capped[0] and np.isfinite(capped).all()
    assert not np.isfinite(raw[-1]) or raw[-1] > 10 * capped[0]


# -- diverged runs -------------------------------------------------------------------------------------------


def test_at_chance_is_within_three_standard_errors_of_one_over_the_classes():
    assert at_chance(10.0, 10, 2000) and at_chance(11.9, 10, 2000) and not at_chance(12.1, 10, 2000)
    assert at_chance(12.8, 10, 1000) and not at_chance(12.9, 10, 1000)
    assert at_chance(3.0, 10, 1000)  # below chance too


def _run(acc, diverged):
    return {"accuracy": acc, "diverged": diverged, "gp_fraction": 0.5, "phases": [["bp", 1]], "epochs": [],
            "steps": 1, "warmup_steps": 0, "predictor_params": 0, "network_params": 1, "wall_s": 0.0}


def test_a_diverged_seed_is_named_in_the_summary_and_stops_a_trial():
    ok = {"bp": _run(90.0, False), "scheme": _run(89.0, False), **{c: _run(88.0, False) for c in
                                                                   ("null", "null_momentum", "truncated")}}
    bad = {**ok, "scheme": _run(10.0, True)}
    res = SurrogateResult(config=SurrogateConfig(scheme="local"), seeds=(3, 4), runs=(ok, bad))
    d = res.to_dict()
    assert d["diverged_seeds"] == [4] and d["diverged_runs"] == [{"seed": 4, "run": "scheme"}]
    assert d["accuracy"] == pytest.approx(49.5)  # kept in the mean, which is why the result is flagged
    with pytest.raises(SurrogateDiverged, match="local on seed 4"):
        res.check_converged()
    SurrogateResult(config=SurrogateConfig(), seeds=(3,), runs=(ok,)).check_converged()
    assert SurrogateResult(config=SurrogateConfig(), seeds=(3,), runs=(ok,)).to_dict()["diverged_seeds"] == []


def test_a_run_that_blows_up_is_marked_diverged(tmp_path, monkeypatch):
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))
    res = evaluate(SurrogateConfig(**FAST, lr=10.0, lr_decay=False, scheme="bp"), seeds=(0,))
    assert res.to_dict()["diverged_seeds"] == [0]


def test_a_study_trial_on_a_diverging_setting_fails_with_the_reason(tmp_path, monkeypatch):
    from dse.config.configuration import Configuration
    from dse.evaluation.evaluator import evaluate as evaluate_configuration

    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))
    cfg = Configuration.from_dict({"workload": {"models": ["resnet18"]}, "seeds": 1,
                                   "training": {**FAST, "lr": 10.0, "lr_decay": False, "scheme": "bp"}})
    with pytest.raises(SurrogateDiverged, match="diverged .*bp on seed 0"):
        evaluate_configuration(cfg, metrics=["accuracy"])


# -- jobs ----------------------------------------------------------------------------------------------------


def test_evaluate_in_two_processes_gives_the_figures_of_one(tmp_path, monkeypatch):
    cfg = SurrogateConfig(**FAST, scheme="efb", gp_fraction=0.4)
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path / "one"))
    one = evaluate(cfg, seeds=(0, 1), jobs=1).to_dict()
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path / "two"))
    ticks = []
    two = evaluate(cfg, seeds=(0, 1), jobs=2, progress=lambda done, total, label: ticks.append((done, total)))
    assert not two.cached and ticks[-1] == (10, 10) and len(ticks) == 10
    two = two.to_dict()
    for d in (one, two):
        for k in ("wall_s", "compute_s", "cached"):
            d.pop(k)
        for r in d["per_seed"]:
            r.pop("epochs")
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)
    again = evaluate(cfg, seeds=(0, 1), jobs=2)  # all from the cache, no pool
    assert again.cached and again.to_dict()["accuracy"] == one["accuracy"]


def test_jobs_must_be_a_positive_integer():
    with pytest.raises(ValueError, match="jobs: an integer >= 1"):
        evaluate(SurrogateConfig(**FAST), seeds=(0,), jobs=0)


# -- several proxy tasks -------------------------------------------------------------------------------------


def test_tasks_train_one_setting_on_each_task_with_each_tasks_defaults():
    cfg = SurrogateConfig.from_dict({"tasks": ["mnist1d", "fashion"], "gp_fraction": 0.4, "scheme": "efb"})
    assert cfg.task == "mnist1d" and cfg.tasks == ("mnist1d", "fashion")
    one, two = cfg.task_configs()
    assert one == SurrogateConfig(gp_fraction=0.4, scheme="efb")
    assert two == SurrogateConfig.from_dict({"task": "fashion", "gp_fraction": 0.4, "scheme": "efb"})
    assert cfg.to_dict()["tasks"] == ["mnist1d", "fashion"]
    assert "tasks" not in SurrogateConfig().to_dict()  # a one-task setting's dict is as before


def test_tasks_survive_a_round_trip_through_toml(tmp_path):
    cfg = SurrogateConfig.from_dict({"tasks": ["mnist1d", "fashion"], "scheme": "local"})
    path = tmp_path / "t.toml"
    path.write_text(cfg.to_toml())
    assert SurrogateConfig.from_toml(path) == cfg


@pytest.mark.parametrize("table,match", [
    ({"tasks": ["mnist1d", "cifar"]}, "tasks: a list of task names, each one of 'mnist1d', 'digits', 'fashion'"),
    ({"tasks": ["mnist1d", "mnist1d"]}, "tasks: each task once"),
    ({"task": "fashion", "tasks": ["mnist1d", "fashion"]}, "tasks: the first is the task"),
    ({"tasks": "fashion"}, "tasks: a list of task names"),
])
def test_bad_tasks_are_refused_naming_the_field(table, match):
    with pytest.raises(ValueError, match=match):
        SurrogateConfig.from_dict(table)


def test_spearman_and_the_rank_agreement_of_two_tasks():
    from models.surrogate.multitask import spearman

    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2], [1, 2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None


def test_cached_seeds_of_two_tasks_are_the_fewest_either_task_has(tmp_path, monkeypatch):
    from models.surrogate.evaluation import cached_seeds

    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))
    two = SurrogateConfig.from_dict({"tasks": ["digits", "mnist1d"], "epochs": 1, "batch_size": 64,
                                     "gp_fraction": 0.5})
    digits, mnist = two.task_configs()
    evaluate(digits, seeds=(0, 1), controls=())  # the first task has two seeds, the second none
    assert cached_seeds(digits, range(3), ()) == 2
    assert cached_seeds(two, range(3), ()) == 0
    evaluate(mnist, seeds=(0,), controls=())
    assert cached_seeds(two, range(3), ()) == 1


def test_a_configuration_with_two_tasks_records_each_and_the_worst_drop(tmp_path, monkeypatch):
    from dse.config.configuration import Configuration
    from dse.evaluation.evaluator import evaluate as evaluate_configuration

    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))
    cfg = Configuration.from_dict({"workload": {"models": ["resnet18"]}, "seeds": 2,
                                   "training": {"tasks": ["digits", "mnist1d"], "epochs": 1, "gp_fraction": 0.5}})
    out = evaluate_configuration(cfg, metrics=["accuracy_drop_worst", "predictor_gain"])
    sur = out["surrogate"]
    assert sur["tasks"] == "digits,mnist1d" and sur["proxy"]["task"] == "digits"
    worst = max(sur["digits_accuracy_drop"], sur["mnist1d_accuracy_drop"])
    assert out["metrics"]["accuracy_drop_worst"] == pytest.approx(worst)
    assert sur["accuracy_drop"] == pytest.approx(sur["digits_accuracy_drop"])
    # the worst task's per-seed drops stand behind the worst drop: its standard error and the paired test
    from dse.evaluation.metrics import seed_record, standard_errors

    rec = seed_record(sur)
    assert len(rec["accuracy_drop_worst"]) == 2 and np.mean(rec["accuracy_drop_worst"]) == pytest.approx(worst)
    assert "accuracy_drop_worst_se" in standard_errors(rec)
    mn = evaluate(SurrogateConfig(epochs=1, gp_fraction=0.5), seeds=(0, 1), controls=("null",))
    assert sur["mnist1d_accuracy_drop"] == pytest.approx(mn.accuracy_drop)  # the second task at its own defaults
    single = Configuration.from_dict({"workload": {"models": ["resnet18"]}, "seeds": 1,
                                      "training": {**FAST, "scheme": "bp"}})
    m = evaluate_configuration(single, metrics=["accuracy_drop_worst"])["metrics"]
    assert m["accuracy_drop_worst"] == m["accuracy_drop"]


def test_dse_surrogate_json_reports_each_task_and_their_rank_agreement(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from dse.cli.app import app

    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))
    toml = tmp_path / "t.toml"
    toml.write_text('[training]\ntasks = ["digits", "mnist1d"]\nepochs = 1\ngp_fraction = 0.5\n')
    out = CliRunner().invoke(app, ["surrogate", str(toml), "--seeds", "2", "--json", "--jobs", "1"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert list(d["tasks"]) == ["digits", "mnist1d"]
    pair = d["rank_agreement"][0]
    assert pair["tasks"] == ["digits", "mnist1d"] and pair["settings"] == ["adagp", "null", "null_momentum",
                                                                           "truncated"]
    assert pair["spearman"] is None or -1 <= pair["spearman"] <= 1
    assert d["accuracy_drop_worst"] == max(t["accuracy_drop"] for t in d["tasks"].values())
    table = CliRunner().invoke(app, ["surrogate", str(toml), "--seeds", "2", "--jobs", "1"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "proxy digits / cnn, 1 epochs" in table.output and "proxy mnist1d / cnn, 1 epochs" in table.output
    assert "rank agreement digits / mnist1d over adagp, null, null_momentum, truncated" in table.output
    from dse.errors import UsageError

    bad = CliRunner().invoke(app, ["surrogate", "--task", "cifar", "--json"])
    assert isinstance(bad.exception, UsageError)  # exit 2 through dse's entry point
    assert str(bad.exception) == "--task: task: one of 'mnist1d', 'digits', 'fashion' (got 'cifar')"


def test_the_provenance_of_a_several_task_result_covers_every_task(tmp_path, monkeypatch):
    """`cached` and `blas` were the first task's: a second task trained just now read as cached, and a kernel
    its runs used was left out (so dse status could not warn of mixed kernels)."""
    import models.surrogate.train as train
    from dse.config.configuration import Configuration
    from dse.evaluation.evaluator import evaluate as evaluate_configuration

    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))

    def cfg(tasks):
        return Configuration.from_dict({"workload": {"models": ["resnet18"]}, "seeds": 1,
                                        "training": {"tasks": tasks, "epochs": 1, "gp_fraction": 0.5}})

    monkeypatch.setattr(train, "blas_kernel", lambda: "kernel A")
    evaluate_configuration(cfg(["digits"]), metrics=["accuracy_drop"])  # the first task's runs, cached
    monkeypatch.setattr(train, "blas_kernel", lambda: "kernel B")
    sur = evaluate_configuration(cfg(["digits", "mnist1d"]), metrics=["accuracy_drop_worst"])["surrogate"]
    assert sur["cached"] is False and sur["blas"] == "kernel A, kernel B"
    again = evaluate_configuration(cfg(["digits", "mnist1d"]), metrics=["accuracy_drop_worst"])["surrogate"]
    assert again["cached"] is True and again["blas"] == "kernel A, kernel B"


def test_dse_surrogate_on_an_exported_configuration_trains_its_seeds(tmp_path, monkeypatch):
    """An exported configuration names the seeds its figures rest on; dse surrogate trained seeds 0..2 instead
    and printed other figures than the study's, with no note."""
    from typer.testing import CliRunner

    from dse.cli.app import app

    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))
    toml = tmp_path / "knee.toml"
    toml.write_text('seeds = 2\nfirst_seed = 5\n[training]\ntask = "digits"\nepochs = 1\n')
    out = CliRunner().invoke(app, ["surrogate", str(toml), "--json", "--jobs", "1"])
    assert out.exit_code == 0, out.output
    assert [r["seed"] for r in json.loads(out.output)["per_seed"]] == [5, 6]
    out = CliRunner().invoke(app, ["surrogate", str(toml), "--json", "--jobs", "1", "--seeds", "1"])
    assert [r["seed"] for r in json.loads(out.output)["per_seed"]] == [5]  # an option still wins
    toml.write_text('seeds = "2"\n[training]\ntask = "digits"\n')
    bad = CliRunner().invoke(app, ["surrogate", str(toml), "--json"])
    assert "seeds: an integer >= 1" in str(bad.exception)
