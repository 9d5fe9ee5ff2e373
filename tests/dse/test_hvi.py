"""The hybrid's ``hvi`` outer selection (dse.search.hvi): its model, its choice, and the strategy running it."""

from __future__ import annotations

import itertools
from dataclasses import replace

import moocore
import numpy as np
import optuna
import pytest

from dse.errors import UsageError
from dse.search.hvi import AdditiveModel, HviSelector, one_hot
from dse.search.runner import run_study as run
from dse.search.study import open_study
from dse.search.studyfile import load_study


def _grid():
    return [{"a": a, "b": b, "c": c} for a, b, c in itertools.product([1, 2, 3, 4], ["x", "y", "z"], [0.5, 1.5])]


def test_the_additive_model_recovers_additive_effects_from_part_of_the_grid():
    settings = _grid()
    eff = {"a": {1: 0.0, 2: 0.8, 3: 1.7, 4: 3.1}, "b": {"x": 0.0, "y": -0.6, "z": 0.4}, "c": {0.5: 0.0, 1.5: 1.2}}
    y = np.array([2.0 + sum(eff[k][s[k]] for k in s) for s in settings])
    y_noisy = y + np.random.default_rng(0).normal(0, 0.05, len(y))
    rows = np.union1d(np.arange(0, 24, 5), np.arange(2, 24, 5))  # 10 of the 24, every level seen
    assert (one_hot(settings)[rows].sum(axis=0) > 0).all()
    mu, sd = AdditiveModel(one_hot(settings)).predict(rows, y_noisy[rows])
    unseen = np.setdiff1d(np.arange(len(settings)), rows)
    assert np.abs(mu[unseen] - y[unseen]).max() < 0.2
    assert (sd > 0).all() and sd.max() < 0.5  # the noise the evidence found is small


def test_the_selector_chooses_the_setting_whose_sub_front_adds_the_most_hypervolume():
    """Two objectives: accuracy drop (training, minimised) and speed-up (hardware, maximised). Each setting's
    hardware speed-up is known; its drop is learned. With the model sure, the choice is the setting of the largest
    hypervolume improvement at its predicted drop, computed here by brute force."""
    settings = [{"k": k, "j": j} for k in range(4) for j in range(3)]
    drop = np.array([1.0 + 0.5 * s["k"] + 0.3 * s["j"] for s in settings])  # additive, no noise
    speed = np.array([1.2 + 0.6 * s["k"] + 0.1 * s["j"] for s in settings])

    def points(i):
        return np.array([[0.0, speed[i]], [0.0, speed[i] * 0.9]])

    ref = [10.0, 1.0]
    sel = HviSelector(settings, points, ["minimize", "maximize"], ref, [0], startup=5, optimism=1e-6)
    trained = {i: [drop[i]] for i in (0, 4, 8, 1, 5)}
    front = np.array([[drop[i], speed[i]] for i in trained])
    rng = np.random.default_rng(0)
    got = sel.next(trained, set(trained), front, rng)

    def hv(x):
        x = np.asarray(x) * [1, -1]
        return moocore.hypervolume(x, ref=np.array(ref) * [1, -1])

    gains = {i: hv(np.vstack([front, [[drop[i], speed[i]]]])) - hv(front) for i in range(12) if i not in trained}
    assert got == max(gains, key=gains.get)
    # taken settings are never proposed; none left: None
    assert sel.next(trained, set(range(12)) - {got}, front, rng) == got
    assert sel.next(trained, set(range(12)), front, rng) is None


def test_before_its_startup_the_selector_draws_untaken_settings_at_random():
    settings = _grid()
    sel = HviSelector(settings, lambda i: np.zeros((0, 2)), ["minimize", "maximize"], [10.0, 1.0], [0], startup=4)
    rng = np.random.default_rng(1)
    taken = set(range(20))
    picks = {sel.next({}, taken, np.zeros((0, 2)), rng) for _ in range(30)}
    assert picks and picks <= set(range(20, 24)) and len(picks) > 1


def _hybrid(study_file, **kw):
    study_file.write_text(study_file.read_text().replace("pred_width = [8, 32]",
                                                         "pred_width = [4, 8, 16, 32, 64, 128]"))
    return replace(load_study(study_file).with_overrides(strategy="hybrid", front_size=3), **kw)


def test_a_hybrid_study_with_hvi_trains_each_setting_once_then_ends(study_file):
    spec = _hybrid(study_file, sampler="hvi", trials=1000, startup_trials=2)
    res = run(spec)
    assert res["exhausted"] and res["surrogate_runs"] == 6
    assert "every training setting of the grid" in res["stop_reason"]
    outer = optuna.load_study(study_name=f"{spec.name}.training",
                              storage=open_study(spec, create=False)._storage).get_trials()
    trained = [t.params["training.pred_width"] for t in outer if t.user_attrs.get("trained")]
    assert sorted(trained) == [4, 8, 16, 32, 64, 128]


def test_hvi_scores_settings_on_one_sample_when_the_hardware_grid_is_larger(study_file):
    spec = _hybrid(study_file, sampler="hvi", trials=1000, startup_trials=1).with_overrides(inner_points=10)
    res = run(spec)
    assert res["exhausted"] and res["surrogate_runs"] == 6


def test_hvi_on_two_workers_trains_each_setting_once(study_file, cli):
    text = study_file.read_text().replace('sampler = "nsga2"', 'sampler = "hvi"')
    study_file.write_text(text.replace("trials = 12", "trials = 1000\nstartup_trials = 2").replace(
        "pred_width = [8, 32]", "pred_width = [4, 8, 16, 32]"))
    r = cli("run", study_file, "--strategy", "hybrid", "--workers", "2", "--quiet")  # the file says joint
    assert r.returncode == 0, r.stderr
    assert "it has searched every training setting of the grid" in r.stderr
    assert "4 training settings trained on 4 surrogate runs" in r.stdout + r.stderr


def test_hvi_is_refused_where_it_cannot_choose(study_file, cli):
    text = study_file.read_text()
    study_file.write_text(text.replace('sampler = "nsga2"', 'sampler = "hvi"'))
    spec = load_study(study_file)  # the file's strategy: joint; `dse run --strategy hybrid` may still run it
    with pytest.raises(UsageError, match=r"study\.sampler: \"hvi\" chooses the hybrid strategy's"):
        run(spec)
    r = cli("run", study_file, "--quiet")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "study.sampler" in r.stderr
    assert not (study_file.parent / "tiny.db").exists()  # refused before the study was created
    study_file.write_text(text.replace('sampler = "nsga2"', 'sampler = "hvi"\nstrategy = "hybrid"').replace(
        "pred_width = [8, 32]", "pred_lr = { low = 0.0001, high = 0.01, log = true }"))
    with pytest.raises(UsageError, match=r"space\.training\.pred_lr: sampler = \"hvi\""):
        load_study(study_file)


def test_costing_many_settings_with_a_steps_memo_is_exact(study_file):
    """hardware_metrics with a memo of per-step costs (what hvi costs every setting of the grid with) gives the
    same figures as without, across schedules that share a predictor and predictors that do not."""
    from accel import HardwareArray
    from dse.evaluation.evaluator import hardware_metrics
    from dse.search.strategies.hybrid import hardware_candidates, hardware_of, training_config

    spec = load_study(study_file).with_overrides(strategy="hybrid")
    arr = HardwareArray.from_list([h for h in (hardware_of(spec, c) for c in
                                               hardware_candidates(spec, max_points=100, seed=0)) if h is not None])
    memo: dict = {}
    for width, gpf, warmup in itertools.product([8, 32], [0.1, 0.4], [0.05, 0.2]):
        cfg = training_config(spec, {"training.pred_width": width})
        cfg = replace(cfg, training=cfg.training.replace(gp_fraction=gpf, warmup=warmup))
        a, b = hardware_metrics(cfg, arr, gpf, steps_memo=memo), hardware_metrics(cfg, arr, gpf)
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)
    assert len(memo) == 2  # one entry per predictor (one model, one word size): the schedules share it


def test_nothing_to_gain_or_an_infinite_value_leaves_the_choice_to_chance():
    settings = [{"k": k} for k in range(6)]
    pts = {i: np.array([[0.0, 1.0 + 0.1 * i]]) for i in range(6)}  # speed-up barely above the reference's 1.0
    sel = HviSelector(settings, lambda i: pts[i], ["minimize", "maximize"], [10.0, 1.0], [0], startup=1)
    front = np.array([[0.0, 5.0]])  # dominates every setting's sub-front, whatever its accuracy drop
    picks = {sel.next({0: [1.0]}, {0}, front, np.random.default_rng(s)) for s in range(20)}
    assert len(picks) > 1 and 0 not in picks
    picks = {sel.next({0: [np.inf], 1: [2.0]}, {0, 1}, np.zeros((0, 2)), np.random.default_rng(s))
             for s in range(5)}
    assert picks == {5}  # the one finite value is the model's: the fastest setting adds the most


def test_hvi_skips_a_setting_that_cannot_be_costed_and_the_run_goes_on(study_file):
    """A combination of knob values that is invalid only together: hvi scores it as nothing (its training then
    fails with the reason), and the walk carries on over the rest."""
    study_file.write_text(study_file.read_text().replace(
        "pred_width = [8, 32]", "gp_phase_init = [2, 8]\ngp_phase_max = [4, 16]\nadaptive = [false]"))
    spec = replace(load_study(study_file).with_overrides(strategy="hybrid", front_size=3), sampler="hvi",
                   trials=1000, startup_trials=1)
    res = run(spec)
    assert res["exhausted"]
    outer = optuna.load_study(study_name=f"{spec.name}.training",
                              storage=open_study(spec, create=False)._storage).get_trials()
    bad = [t for t in outer if t.params.get("training.gp_phase_init") == 8
           and t.params.get("training.gp_phase_max") == 4]
    assert bad and all("gp_phase_init" in t.user_attrs.get("fail_reason", "") for t in bad)
    assert sum(1 for t in outer if t.user_attrs.get("trained") and t.state.name == "COMPLETE") == 3


def test_hvi_is_refused_for_what_it_cannot_know_before_training(study_file):
    text = study_file.read_text().replace('sampler = "nsga2"', 'sampler = "hvi"\nstrategy = "hybrid"')
    study_file.write_text(text.replace("pred_width = [8, 32]", "adaptive = [true, false]"))
    with pytest.raises(UsageError, match=r"study\.sampler: \"hvi\" costs each training setting.*adaptive"):
        load_study(study_file)
    study_file.write_text(text + '\n[[constraints]]\nmetric = "accuracy_drop"\nmax = 2.0\n')
    with pytest.raises(UsageError, match=r"constraint on the training metric 'accuracy_drop'"):
        load_study(study_file)


def test_equal_trained_values_and_an_infinite_front_do_not_mislead_the_model():
    settings = _grid()
    rows = np.arange(0, 24, 5)
    mu, sd = AdditiveModel(one_hot(settings)).predict(rows, np.full(len(rows), 0.1))
    assert np.allclose(mu, 0.1) and sd.min() > 1e-3  # not certain: the unit is a tenth of the value
    sel = HviSelector(settings, lambda i: np.array([[0.0, 2.0 + i]]), ["minimize", "maximize"], [10.0, 1.0], [0],
                      startup=1)
    got = sel.next({0: [1.0]}, {0}, np.array([[0.0, np.inf]]), np.random.default_rng(0))
    assert got is not None and got != 0


def _two_workers(study_file, sampler):
    """Two hybrid workers on one storage, in this process (``b`` marked as another process)."""
    import dse.search.strategies.hybrid as hybrid
    from dse.search.runguard import Guard
    from dse.search.runner import Runner
    from dse.search.study import storage_url

    spec = _hybrid(study_file, sampler=sampler, trials=1000, startup_trials=2)
    url = storage_url(spec, None)
    workers = []
    for w in (0, 1):
        runner = Runner(spec, open_study(spec, url, create=True), url, spec.trials, w, None)
        workers.append(hybrid.Hybrid(spec, runner))
        workers[-1].guard = Guard()  # what the runner gives each worker's strategy
    workers[1].me = "elsewhere:1:0"
    return workers


@pytest.mark.parametrize("sampler", ["hvi", "grid"])
def test_a_worker_whose_queued_setting_another_takes_still_trains_a_chosen_one(study_file, sampler):
    """The race of two workers: A queues its choice, and before A's trial takes it, B steps. B does not take
    A's queued setting as its own choice: it chooses and queues one of its own, so each trains a setting the
    strategy chose (B A's, the oldest queued; A B's), none one the outer sampler drew."""
    a, b = _two_workers(study_file, sampler)
    queued, stepped = [], []
    real = a.outer.enqueue_trial

    def enqueue_then_b_steps(params, **kw):
        real(params, **kw)
        queued.append(params)
        if not stepped:
            stepped.append(True)
            assert b.step()  # B, in the window between A's queueing and A's trial

    a.outer.enqueue_trial = enqueue_then_b_steps
    b_real = b.outer.enqueue_trial

    def b_enqueue(params, **kw):
        b_real(params, **kw)
        queued.append(params)

    b.outer.enqueue_trial = b_enqueue
    assert a.step()
    trials = a.outer.get_trials()
    trained = [t.params for t in trials if t.user_attrs.get("trained")]
    assert len(trained) == 2 and trained[0] != trained[1]
    assert sorted(map(str, trained)) == sorted(map(str, queued))  # only settings the strategy chose
    assert [t.user_attrs["queued_by"] for t in trials] == [a.me, b.me]
    assert not a.lost and not b.lost


def test_a_worker_left_no_queued_setting_trains_nothing_and_chooses_again(study_file):
    """Should another process take the setting a worker queued (an older dse, a retry's bookkeeping), the
    worker's trial finds none left: the outer sampler's proposal is not trained; the trial is pruned with its
    reason, not counted as fruitless, and the next step chooses and trains a setting."""
    a, _ = _two_workers(study_file, "hvi")
    thief = optuna.load_study(study_name=a.outer.study_name, storage=a.outer._storage)
    real = a.outer.enqueue_trial
    stolen = []

    def enqueue_then_taken(params, **kw):
        real(params, **kw)
        if not stolen:
            stolen.append(thief.ask().number)  # pops the queued setting

    a.outer.enqueue_trial = enqueue_then_taken
    assert a.step() is True and a.lost and a.repeats == 0
    mine = a.outer.get_trials()[-1]
    assert mine.state.name == "PRUNED" and mine.params == {} and "trained" not in mine.user_attrs
    assert "taken by another worker" in mine.user_attrs["fail_reason"]
    assert a.step() is True and not a.lost
    last = a.outer.get_trials()[-1]
    assert last.user_attrs.get("trained") and last.user_attrs["queued_by"] == a.me
    assert last.params != a.outer.get_trials()[stolen[0]].params  # the taken setting counts as taken


def test_a_run_ending_fails_the_settings_its_worker_queued_and_did_not_train(study_file, monkeypatch):
    """A queued choice left waiting when the run ends (its worker took an older queued setting instead) is
    failed as interrupted, so it is neither counted as searched nor left in the queue: the run watches the
    hybrid's outer study as it watches the main one."""
    from dse.search import runguard
    from dse.search.runguard import drop_queued

    watched, real = [], runguard.Guard.watch
    monkeypatch.setattr(runguard.Guard, "watch", lambda self, study: watched.append(study.study_name)
                        or real(self, study))
    spec = _hybrid(study_file, sampler="hvi", trials=1000, startup_trials=2)
    assert run(spec)["surrogate_runs"] == 6
    assert watched == [spec.name, f"{spec.name}.training"]
    a, _ = _two_workers(study_file, "hvi")
    a.outer.enqueue_trial({n: k.values()[0] for n, k in a.train_knobs},
                          user_attrs={"queued_by": a.me}, skip_if_exists=False)
    assert drop_queued(a.outer) == 1
    t = a.outer.get_trials()[-1]
    assert t.state.name == "FAIL" and t.user_attrs["fail_reason"].startswith("interrupted")


@pytest.mark.parametrize("sampler", ["hvi", "grid"])
def test_a_choice_another_worker_queued_meanwhile_is_made_again(study_file, sampler):
    """Two workers choosing from the same trained settings choose alike: while A chooses, B queues the setting
    A is about to choose. A sees it taken and chooses again, so each setting is trained once and no trial of
    either is turned away (none pruned as being trained elsewhere, none told an earlier result)."""
    from dse.search.runguard import queue

    a, b = _two_workers(study_file, sampler)
    real, calls = a._choose, []

    def b_queues_the_same(trials):
        calls.append(1)
        if len(calls) == 1:
            same = b._next_setting()
            queue(b.outer, same, by=b.me)
            return same
        return real(trials)

    a._choose = b_queues_the_same
    assert a.step() and b.step()
    assert len(calls) == 2
    trials = a.outer.get_trials()
    trained = [str(t.params) for t in trials if t.user_attrs.get("trained")]
    assert len(trained) == 2 == len(set(trained))
    assert not [t for t in trials if t.state.name == "PRUNED" or "same_as" in t.user_attrs]


def test_a_setting_queued_without_a_worker_mark_is_trained(study_file):
    """A setting queued with no ``queued_by`` (a study an older dse queued) is any worker's to take: trained,
    not pruned as lost."""
    a, _ = _two_workers(study_file, "grid")
    setting = {n: k.values()[0] for n, k in a.train_knobs}
    a.outer.enqueue_trial(setting)
    assert a.step() and not a.lost
    t = a.outer.get_trials()[0]
    assert t.user_attrs.get("trained") and t.params == setting


def test_the_grid_does_not_end_while_its_last_setting_waits_queued_by_another_worker(study_file):
    """The last untrained setting waits in the queue marked with a worker on another machine (Optuna's
    heartbeat retry keeps the retried trial's ``queued_by``): it counts as taken, so nothing is left to
    choose, yet the grid is not done until a trial has taken it."""
    a, _ = _two_workers(study_file, "grid")
    grid, last = list(a.grid), a.grid[-1]
    a.grid = grid[:-1]
    while a.step():
        pass
    a.grid, a.grid_done = grid, False
    a.outer.enqueue_trial(last, user_attrs={"queued_by": "otherhost:4242:1"})
    assert a.step() and not a.grid_done
    assert last in [t.params for t in a.outer.get_trials() if t.user_attrs.get("trained")]
    assert a.step() is False and a.grid_done


def test_failing_a_queued_trial_another_process_took_meanwhile_leaves_it_running(tmp_path):
    """drop_queued lists the waiting trials, then fails them; one popped by another process in between is
    being run there and is left alone (claimed first, as Optuna pops one)."""
    from dse.search.runguard import _fail

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}")
    study.enqueue_trial({"x": 1.0})
    listed = study.get_trials(states=(optuna.trial.TrialState.WAITING,))[0]
    other = optuna.load_study(study_name=study.study_name, storage=study._storage).ask()  # pops it
    assert other.number == listed.number
    assert _fail(study, listed, "interrupted: test") is False
    t = study.get_trials()[0]
    assert t.state.name == "RUNNING" and "fail_reason" not in t.user_attrs
