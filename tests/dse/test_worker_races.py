"""Races between workers on one study, each reproduced deterministically (hook calls against a storage, or an
interleaving forced by a patch) rather than by timing: the grid sampler's choice of points, a queued retry's
point, a dead worker's point, and the trial budget under retries. Each failed on the code before the fix."""
from __future__ import annotations

from dataclasses import replace

import optuna
from optuna.trial import TrialState

from dse.search.runguard import owner
from dse.search.samplers import GRID_NONE, make_sampler
from dse.search.study import open_storage
from dse.search.studyfile import load_study
from studyfiles import edit, write_study


def _grid_study(tmp_path, trials):
    text = edit('rows = [8, 16, 32]\ncols = [8, 16, 32]\nbandwidth_gbps = [6.4, 25.6]', 'rows = [8, 16, 32]',
                edit('sampler = "nsga2"', 'sampler = "grid"', edit("trials = 12", f"trials = {trials}")))
    return text, load_study(write_study(tmp_path, text))

DEAD = owner().split(":")[0] + ":999999999:0"  # a process of this host that is gone


def _setup(tmp_path, complete):
    _, spec = _grid_study(tmp_path, 20)
    sampler = make_sampler(spec, seed=3)
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'g.db'}"), sampler=sampler)
    dists = {k: optuna.distributions.CategoricalDistribution(v) for k, v in spec.space.grid().items()}
    for p in sampler._all_grids[:complete]:
        study.add_trial(optuna.trial.create_trial(params=dict(zip(sampler._param_names, p)),
                                                  distributions=dists, values=[0.0]))
    return spec, sampler, study, dists


def _running(study, sampler, dists, gid, who, params=True):
    st = study._storage
    tid = st.create_new_trial(study._study_id)
    st.set_trial_system_attr(tid, "grid_id", gid)
    if params:
        for k, v in zip(sampler._param_names, sampler._all_grids[gid]):
            st.set_trial_param(tid, k, dists[k].to_internal_repr(v), dists[k])
    if who:
        st.set_trial_user_attr(tid, "worker", who)
    return st.get_trial(tid)


def test_two_workers_ending_with_one_point_left_do_not_both_take_it(tmp_path):
    """9 points complete, worker 1 runs point 9, worker 2 runs point 10, point 11 is free. Both end at once:
    each after_trial sees point 11 free and goes on; each new trial's before_trial then took point 11 (the
    second by a fallback to the held points). Now the second finds no point left and is marked to be pruned."""
    spec, sampler, study, dists = _setup(tmp_path, 9)
    st = study._storage
    a = _running(study, sampler, dists, 9, owner())
    b = _running(study, sampler, dists, 10, owner())  # (the other live worker)
    stops = []
    study.stop = lambda: stops.append(True)
    sampler.after_trial(study, a, TrialState.COMPLETE, [0.0])  # b still running
    sampler.after_trial(study, b, TrialState.COMPLETE, [0.0])  # a still running (same moment)
    assert stops == []  # both go on (correctly: point 11 is free)
    st.set_trial_state_values(a._trial_id, TrialState.COMPLETE, [0.0])
    st.set_trial_state_values(b._trial_id, TrialState.COMPLETE, [0.0])
    new = [st.get_trial(st.create_new_trial(study._study_id)) for _ in range(2)]  # each worker's next trial
    for t in new:
        sampler.before_trial(study, st.get_trial(t._trial_id))
    got = [st.get_trial(t._trial_id).system_attrs for t in new]
    assert got[0]["grid_id"] == 11 and "grid_id" not in got[1] and got[1].get(GRID_NONE), got  # no repeat
    # the second is pruned before it suggests anything; its worker then waits while point 11 runs, and stops
    # once it is done
    sampler.after_trial(study, st.get_trial(new[1]._trial_id), TrialState.PRUNED, None)
    st.set_trial_state_values(new[1]._trial_id, TrialState.PRUNED)
    assert stops == [] and sampler.outlook(study) == "wait"
    for k, v in zip(sampler._param_names, sampler._all_grids[11]):  # (its values, as suggested)
        st.set_trial_param(new[0]._trial_id, k, dists[k].to_internal_repr(v), dists[k])
    st.set_trial_state_values(new[0]._trial_id, TrialState.COMPLETE, [0.0])
    assert sampler.outlook(study) == "done"


def test_a_popped_retry_holds_its_point_before_its_values_are_suggested(tmp_path):
    """A dead worker's trial is retried as a queued trial (fixed_params). Once a worker pops it (RUNNING, its
    params not suggested yet) another worker's new trial takes the same point: it is not held by values
    (no params yet) nor by grid_id (a queued trial has none)."""

    spec, sampler, study, dists = _setup(tmp_path, 10)
    st = study._storage
    dead = _running(study, sampler, dists, 10, DEAD)
    from dse.search.study import recover_dead_workers
    assert recover_dead_workers(study) == [dead.number]
    (w,) = study.get_trials(states=(TrialState.WAITING,))
    assert st.set_trial_state_values(w._trial_id, TrialState.RUNNING)  # popped by worker 1, as Optuna pops
    st.set_trial_user_attr(w._trial_id, "worker", owner())
    fresh = st.get_trial(st.create_new_trial(study._study_id))  # worker 2's new trial
    sampler.before_trial(study, fresh)
    got = st.get_trial(fresh._trial_id).system_attrs["grid_id"]
    assert got != 10, "worker 2 took point 10, which the popped retry evaluates (point 11 left)"


def test_a_waiting_retry_holds_its_point(tmp_path):
    """The same while the retry still waits: a trial created just before it was queued takes its point."""
    spec, sampler, study, dists = _setup(tmp_path, 10)
    st = study._storage
    _running(study, sampler, dists, 10, DEAD)
    fresh = st.get_trial(st.create_new_trial(study._study_id))  # worker 2 asks (no trial waits yet)
    from dse.search.study import recover_dead_workers
    recover_dead_workers(study)  # worker 1 (or the parent) queues the retry of point 10
    sampler.before_trial(study, fresh)
    assert st.get_trial(fresh._trial_id).system_attrs["grid_id"] != 10, "point 10 taken twice (retry + new)"


def test_the_retry_of_a_grid_trial_killed_before_its_values_were_suggested_runs(tmp_path):
    """A worker killed between the sampler's before_trial (grid_id set) and the objective's suggest (no params
    yet; 'worker' recorded) leaves a RUNNING trial with no params. Its retry is queued with fixed_params = {}:
    before_trial skips it (fixed_params), the grid sampler's sample_independent then raises ValueError, and
    the retry is recorded as a genuine failure that counts toward the budget; the point is never retried."""
    from dataclasses import replace

    from dse.search.runguard import retried
    from dse.search.runner import run_study
    from dse.search.study import counts_toward_budget

    _, spec = _grid_study(tmp_path, 20)
    assert run_study(replace(spec, trials=2))["finished"] == 2
    study = optuna.load_study(study_name=spec.name, storage=f"sqlite:///{tmp_path / 'tiny.db'}")
    st = study._storage
    tid = st.create_new_trial(study._study_id)
    st.set_trial_system_attr(tid, "grid_id", 5)
    st.set_trial_system_attr(tid, "search_space", make_sampler(spec, 0)._search_space)
    st.set_trial_user_attr(tid, "worker", DEAD)
    res = run_study(replace(spec, trials=4))
    trials = study.get_trials()
    bad = [t for t in trials if t.state == TrialState.FAIL and "ValueError" in t.user_attrs.get("fail_reason", "")]
    assert not bad, (res["finished"], res["failed"], [(t.number, t.user_attrs["fail_reason"]) for t in bad],
                     [counts_toward_budget(t, retried(trials)) for t in bad])


def _live_other():
    """An owner record of a live process of this host other than this one (another worker)."""
    import subprocess

    from dse.search.runguard import _start_time

    p = subprocess.Popen(["sleep", "120"])
    return p, f"{owner().split(':')[0]}:{p.pid}:{_start_time(p.pid)}"


def test_the_retry_of_a_trial_never_admitted_is_admitted_within_the_budget(tmp_path):
    """Budget 3: trials 0, 1 complete, trial 2 runs in a live worker. Worker B created trial 3 (it recorded
    itself: trial_objective sets 'worker' before runner.admit; a hybrid batch creates its trials RUNNING with
    'worker' before admitting them) and was SIGKILLed before admit would have pruned it (2 + 1 counting trials
    precede it = the budget). The recovery retries it, the retry skips admit: 4 trials count for a budget of 3."""
    from dataclasses import replace

    from dse.search.runner import run_study
    from dse.search.study import budget_state

    _, spec = _grid_study(tmp_path, 20)
    spec = replace(spec, sampler="random")
    assert run_study(replace(spec, trials=2))["finished"] == 2
    study = optuna.load_study(study_name=spec.name, storage=f"sqlite:///{tmp_path / 'tiny.db'}")
    first = study.trials[0]
    proc, other = _live_other()
    try:
        for who in (other, DEAD):  # trial 2: the live worker's (admitted); trial 3: the dead one's (not)
            study.add_trial(optuna.trial.create_trial(state=TrialState.RUNNING, params=first.params,
                                                      distributions=first.distributions, user_attrs={"worker": who}))
        res = run_study(replace(spec, trials=3), timeout=5)  # (then waits for the live trial 2)
        st = study._storage
        st.set_trial_state_values(study.trials[2]._trial_id, TrialState.COMPLETE, first.values)  # B's trial ends
        assert budget_state(study)["done"] <= 3, (res["finished"], budget_state(study))
    finally:
        proc.kill()
        proc.wait()


def test_a_trial_admitted_between_failing_a_dead_trial_and_queuing_its_retry_keeps_the_budget(tmp_path, monkeypatch):
    """Budget 3: trials 0, 1 complete, trial 2 (admitted) runs in a worker that dies. recover_dead_workers fails
    trial 2 ("interrupted": no longer counting) and then queues its retry; a worker admitting its new trial 3
    in between sees 2 counting trials before it and admits it; the retry (trial 4) skips admit: 4 trials count."""
    from dataclasses import replace

    from dse.search import runguard
    from dse.search.runner import BudgetTracker, run_study
    from dse.search.study import budget_state, recover_dead_workers

    _, spec = _grid_study(tmp_path, 20)
    spec = replace(spec, sampler="random")
    assert run_study(replace(spec, trials=2))["finished"] == 2
    study = optuna.load_study(study_name=spec.name, storage=f"sqlite:///{tmp_path / 'tiny.db'}")
    first = study.trials[0]
    study.add_trial(optuna.trial.create_trial(state=TrialState.RUNNING, params=first.params,
                                              distributions=first.distributions, user_attrs={"worker": DEAD}))
    admitted = []
    real = runguard.queue

    def queue(*a, **k):  # another worker's objective runs runner.admit right now
        n = study._storage.get_trial_number_from_id(study._storage.create_new_trial(study._study_id))
        tracker = BudgetTracker(study)
        tracker.refresh()
        admitted.append(tracker.counting_before(n) < 3)  # Runner.admit's rule
        return real(*a, **k)

    monkeypatch.setattr(runguard, "queue", queue)
    recover_dead_workers(study)
    monkeypatch.undo()
    assert admitted == [True]
    # while trial 3 runs, a worker runs the retry (trial 4): it asks for admission too, and is refused
    run_study(replace(spec, trials=3), timeout=3)  # (then waits for trial 3 until its timeout)
    t4 = study.trials[4]
    assert t4.state == TrialState.PRUNED and t4.user_attrs["fail_reason"] == "budget reached by other workers"
    study._storage.set_trial_state_values(study.trials[3]._trial_id, TrialState.COMPLETE, first.values)
    assert budget_state(study)["done"] == 3


def test_a_point_held_by_a_dead_trial_is_taken_over_once(tmp_path):
    """11 points complete, point 11 held by a RUNNING trial whose worker died. A worker ending its trial goes on
    (the point is left to retry: cfa09c9); its next trial, created before anyone ran recover_dead_workers (the
    runner does so once a second), takes point 11 by before_trial's fallback ("running trials hold every one
    left: the untried ones"); the recovery then queues a retry of point 11 too: the point is evaluated twice."""
    from dse.search.study import recover_dead_workers

    spec, sampler, study, dists = _setup(tmp_path, 11)
    st = study._storage
    _running(study, sampler, dists, 11, DEAD)
    fresh = st.get_trial(st.create_new_trial(study._study_id))
    sampler.before_trial(study, fresh)
    assert st.get_trial(fresh._trial_id).system_attrs["grid_id"] == 11
    recover_dead_workers(study)
    retries = study.get_trials(states=(TrialState.WAITING,))
    assert not retries, "point 11: a new trial and a queued retry (two evaluations)"


def test_a_recordless_orphan_past_the_grace_does_not_hold_the_last_point(tmp_path):
    """A RUNNING trial with no owner record older than ORPHAN_GRACE_S is dead by runguard.orphans' rule, but
    after_trial counts it as a live holder (owner_alive('') is None, not False): the worker stops with the
    point untried (the run's end reason then says the grid is done)."""
    import datetime

    from dse.search.runguard import orphans

    spec, sampler, study, dists = _setup(tmp_path, 10)
    st = study._storage
    old = datetime.datetime.now() - datetime.timedelta(seconds=300)
    study.add_trial(optuna.trial.create_trial(state=TrialState.RUNNING, system_attrs={"grid_id": 11},
                                              params={}, distributions={}))
    tid = study.trials[-1]._trial_id
    # (add_trial stamps datetime_start now: backdate it as a trial created 5 minutes ago)
    from sqlalchemy import text
    engine = getattr(st, "_backend", st).engine
    with engine.begin() as c:
        c.execute(text("UPDATE trials SET datetime_start = :d WHERE trial_id = :t"), {"d": old, "t": tid})
    assert [t._trial_id for t in orphans(study)[0]] == [tid]  # dead by the recovery's rule
    mine = _running(study, sampler, dists, 10, owner())
    stops = []
    study.stop = lambda: stops.append(True)
    sampler.after_trial(study, mine, TrialState.COMPLETE, [0.0])
    assert stops == [], "stopped: point 11 left to an orphan the recovery counts as dead"


def test_a_new_trial_between_a_recovery_failing_a_trial_and_queuing_its_retry_leaves_its_point(tmp_path, monkeypatch):
    """recover_dead_workers fails the dead holder of point 11 (FAIL 'interrupted': untried, unheld) and only then
    queues its retry. A worker's before_trial in between finds point 11 free and takes it: the new trial and the
    retry (which skips before_trial: all its values fixed) both evaluate point 11."""
    from dse.search import runguard
    from dse.search.study import recover_dead_workers

    spec, sampler, study, dists = _setup(tmp_path, 11)
    st = study._storage
    _running(study, sampler, dists, 11, DEAD)
    got = []
    real = runguard.queue

    def queue(*a, **k):  # another worker's new trial chooses its point right now
        tid = st.create_new_trial(study._study_id)
        sampler.before_trial(study, st.get_trial(tid))
        got.append(st.get_trial(tid).system_attrs.get("grid_id"))
        return real(*a, **k)

    monkeypatch.setattr(runguard, "queue", queue)
    recover_dead_workers(study)
    monkeypatch.undo()
    (w,) = study.get_trials(states=(TrialState.WAITING,))
    retry_gid = sampler._index[tuple(w.system_attrs["fixed_params"][n] for n in sampler._param_names)]
    assert got != [retry_gid], f"point {retry_gid} taken by a new trial and queued to retry"


def test_a_worker_waits_rather_than_prune_trials_while_a_recordless_trial_chooses(tmp_path):
    """11 points complete; a trial created by a worker SIGKILLed before its before_trial (RUNNING, no point, no
    owner record, younger than ORPHAN_GRACE_S). A resumed single worker: every trial is GRID_NONE (the orphan is
    'ahead' of it and takes the last free point by the rule) and after_trial does not stop (the point is free):
    the worker creates pruned trials as fast as it can until the 30 s grace ends."""
    from dse.search.runner import run_study

    _, spec = _grid_study(tmp_path, 20)
    assert run_study(replace(spec, trials=11))["finished"] == 11
    study = optuna.load_study(study_name=spec.name, storage=f"sqlite:///{tmp_path / 'tiny.db'}")
    study._storage.create_new_trial(study._study_id)  # the killed worker's trial
    res = run_study(spec, timeout=3)
    trials = study.get_trials()
    none = [t for t in trials if GRID_NONE in t.system_attrs]
    assert len(none) <= 1, (len(none), res["finished"], res.get("exhausted"))


def test_a_resumed_finished_grid_makes_no_trial(tmp_path):
    """A resumed run of a finished grid (one worker) now makes one pruned GRID_NONE trial; dse status counts it
    under 'failures'."""
    from dse.results.views import status_summary
    from dse.search.runner import run_study

    _, spec = _grid_study(tmp_path, 20)
    r1 = run_study(spec)
    r2 = run_study(spec)
    s = status_summary(spec)
    print(r1.get("stop_reason"), "|", r2.get("stop_reason"), "|", s["trials"], s["failures"], s.get("ended_early"))
    assert not any(k.startswith("no grid point left") for k in s["failures"]), s["failures"]


def test_a_retry_that_completes_the_grid_records_that_the_grid_is_done(tmp_path):
    """A queued retry run by the runner loop (not Joint.step) completes the grid: Joint.stopped stays False, so
    record_end stores the generic stop_reason, not GRID_DONE."""
    import itertools

    from dse.search.runguard import queue
    from dse.search.runner import run_study
    from dse.search.strategies.joint import Joint
    from dse.search.study import ended_early

    _, spec = _grid_study(tmp_path, 20)
    assert run_study(replace(spec, trials=11))["finished"] == 11
    study = optuna.load_study(study_name=spec.name, storage=f"sqlite:///{tmp_path / 'tiny.db'}")
    pts = {tuple(sorted(t.params.items())) for t in study.trials}
    grid = spec.space.grid()
    last = next(p for p in itertools.product(*grid.values()) if tuple(sorted(zip(grid, p))) not in pts)
    queue(study, dict(zip(grid, last)), retry_of=10)
    res = run_study(spec)
    assert res["exhausted"]
    assert ended_early(study) == Joint.GRID_DONE, (res.get("stop_reason"), ended_early(study))


def test_a_lost_takeover_does_not_move_to_a_point_a_later_trial_counted_on(tmp_path, monkeypatch):
    """10 points complete; dead D holds point 10; point 11 free. Trials A (n) and B (n+1) choose at once. A reads
    the study (D gone: free [10, 11], ahead 0) and tries to take over 10; meanwhile B reads (A still choosing:
    ahead 1) and takes free[1] = 11, and the recovery fails D first (A's fail_orphan loses). A then goes on to the
    next point of its list: 11, which B has. Point 11 is evaluated twice (and 10 by the retry)."""
    from dse.search import runguard
    from dse.search.study import recover_dead_workers

    spec, sampler, study, dists = _setup(tmp_path, 10)
    st = study._storage
    _running(study, sampler, dists, 10, DEAD)
    a = st.get_trial(st.create_new_trial(study._study_id))
    b = st.get_trial(st.create_new_trial(study._study_id))
    real = runguard.fail_orphan
    calls = []

    def fail_orphan(s, t, reason):
        if not calls:
            calls.append(1)
            sampler.before_trial(study, st.get_trial(b._trial_id))  # B chooses now
            recover_dead_workers(study)  # and a worker's periodic recovery fails D first
        return real(s, t, reason)

    monkeypatch.setattr(runguard, "fail_orphan", fail_orphan)
    sampler.before_trial(study, st.get_trial(a._trial_id))
    monkeypatch.undo()
    ga = st.get_trial(a._trial_id).system_attrs.get("grid_id")
    gb = st.get_trial(b._trial_id).system_attrs.get("grid_id")
    assert ga is None or ga != gb, f"A and B both took point {ga}"


def test_a_young_recordless_holder_of_the_last_point_is_waited_for_then_taken_over(tmp_path):
    """A worker killed after the sampler gave its trial the last point (grid_id) and before it recorded itself
    leaves a RUNNING trial without an owner record. A resumed single worker waits while that trial is younger
    than the orphan grace (it may be another process's, about to record itself) -- it neither repeats the
    point nor ends the run with it untried (it did both, on two versions of the rule) -- and once the trial is
    older, takes its point over."""
    import datetime

    from sqlalchemy import text

    from dse.search.runner import run_study

    spec, study, tid = _last_point_held(tmp_path)
    res = run_study(spec, timeout=2)
    assert res["complete"] == 11 and not res["exhausted"] and len(study.get_trials()) == 12
    engine = getattr(study._storage, "_backend", study._storage).engine
    with engine.begin() as c:  # (as if it were created 5 minutes ago)
        c.execute(text("UPDATE trials SET datetime_start = :d WHERE trial_id = :t"),
                  {"d": datetime.datetime.now() - datetime.timedelta(seconds=300), "t": tid})
    res = run_study(spec, timeout=60)
    assert res["complete"] == 12 and res["exhausted"]


def test_a_point_held_by_another_hosts_trial_ends_the_run_saying_so(tmp_path, monkeypatch):
    """A worker on another machine (or a previous container: its hostname differs) was killed holding the grid's
    last untried point, and the study is resumed here on a SQLite file (no heartbeat): nothing here can tell
    whether that trial will end. The run waited for ever, silently; now it waits HELD_WAIT_S, then ends and
    says which trial holds the point and how to free it."""
    from dse.search.runner import run_study
    from dse.search.strategies.joint import Joint
    from dse.search.study import ended_early

    spec, study, tid = _last_point_held(tmp_path)
    study._storage.set_trial_user_attr(tid, "worker", "elsewhere:4242:1")
    monkeypatch.setattr(Joint, "HELD_WAIT_S", 0.5)
    res = run_study(spec, timeout=60)
    assert res["complete"] == 11 and res["exhausted"] and len(study.get_trials()) == 12  # no repeat, no wait
    for reason in (res["stop_reason"], ended_early(study)):
        assert "trial 11 (elsewhere:4242:1)" in reason and "another machine" in reason and "tell(" in reason


def test_a_retry_queued_without_values_is_counted_ahead_by_a_new_trial(tmp_path, monkeypatch):
    """A worker killed between before_trial (grid_id) and the suggest leaves a trial with no values; its retry is
    queued with fixed_params = {}, so it chooses a point. Popped (RUNNING) at the moment a new trial chooses too,
    both from one reading: the new trial's `ahead` skipped the retry (it has fixed_params), the retry's skipped
    nothing: both took free[0]."""
    from dse.search.study import recover_dead_workers

    spec, sampler, study, dists = _setup(tmp_path, 9)
    st = study._storage
    _running(study, sampler, dists, 9, DEAD, params=False)  # (holds grid_id 9, no values)
    recover_dead_workers(study)
    (w,) = study.get_trials(states=(TrialState.WAITING,))
    assert w.system_attrs["fixed_params"] == {}
    assert st.set_trial_state_values(w._trial_id, TrialState.RUNNING)  # popped by worker 1
    fresh = st.create_new_trial(study._study_id)  # worker 2's new trial (numbered after the retry)
    snap = st.get_all_trials(study._study_id)  # one reading for both
    monkeypatch.setattr(st, "get_all_trials", lambda *a, **k: snap)
    sampler.before_trial(study, st.get_trial(w._trial_id))
    sampler.before_trial(study, st.get_trial(fresh))
    monkeypatch.undo()
    a = st.get_trial(w._trial_id).system_attrs.get("grid_id")
    b = st.get_trial(fresh).system_attrs.get("grid_id")
    assert a is None or a != b, f"the retry and the new trial both took point {a}"


def _last_point_held(tmp_path):
    """(spec, study, trial id): a grid study with 11 of its 12 points complete and a RUNNING trial without an
    owner record holding the last one (grid_id), as a worker killed after the sampler gave it leaves."""
    from dse.search.runner import run_study
    from dse.search.samplers import grid_untried

    _, spec = _grid_study(tmp_path, 20)
    assert run_study(replace(spec, trials=11))["finished"] == 11
    study = optuna.load_study(study_name=spec.name, storage=f"sqlite:///{tmp_path / 'tiny.db'}")
    sampler = make_sampler(spec, 0)
    (left,) = grid_untried(sampler._param_names, sampler._all_grids, study.get_trials())
    tid = study._storage.create_new_trial(study._study_id)
    study._storage.set_trial_system_attr(tid, "grid_id", left)
    return spec, study, tid
