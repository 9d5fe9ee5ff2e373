"""Strategies and samplers are extension points: a new strategy is one class in one registry (its [study]
options, validation and helper studies declared on it); a sampler is a registry entry, or an Optuna sampler
instance passed through the Python API."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from dataclasses import replace

import optuna
import pytest

import dse
from dse.errors import UsageError
from dse.search.samplers import SAMPLERS
from dse.search.strategies import STRATEGIES, Option
from dse.search.strategies.joint import Joint
from dse.search.studyfile import load_study
from studyfiles import FAST_STUDY, edit, with_strategy, write_study


class Probe(Joint):
    """A strategy as a contributor would add one: the joint search with an option of its own."""

    name = "probe"
    summary = "a test strategy"
    options = (Option("probe_rounds", int, 2, low=1, high=5),)
    stop_reason = "the probe had nothing left to propose"

    @classmethod
    def validate(cls, spec) -> None:
        if spec.trials > 10:
            raise UsageError("study.trials: the probe runs at most 10")

    @classmethod
    def helper_studies(cls, study_name: str) -> list[str]:
        return [f"{study_name}.probe"]

    def figures(self):
        return {"probe_rounds": self.spec.probe_rounds}


@pytest.fixture
def probe(monkeypatch):
    monkeypatch.setitem(STRATEGIES, "probe", Probe)
    return Probe


def test_a_registered_strategy_runs_with_its_own_options(tmp_path, probe):
    text = edit("trials = 12", "trials = 4", with_strategy(FAST_STUDY, "probe", probe_rounds=3))
    spec = load_study(write_study(tmp_path, text, "p.toml"))
    # its own option as the file gives it; every other registered strategy's at its default
    assert spec.options == {**{o.name: o.default for s in STRATEGIES.values() for o in s.options}, "probe_rounds": 3}
    res = dse.run(spec)
    assert res["strategy"] == "probe" and res["finished"] == 4 and res["probe_rounds"] == 3


def test_a_strategy_validates_the_study_and_bounds_its_options(tmp_path, probe):
    with pytest.raises(UsageError, match="study.trials: the probe runs at most 10"):
        load_study(write_study(tmp_path, with_strategy(FAST_STUDY, "probe")))
    text = edit("trials = 12", "trials = 4", with_strategy(FAST_STUDY, "probe", probe_rounds=9))
    with pytest.raises(UsageError, match="probe_rounds"):
        load_study(write_study(tmp_path, text))


def test_an_option_of_no_strategy_is_refused_with_the_allowed_keys(tmp_path):
    with pytest.raises(UsageError, match="front_size") as e:
        load_study(write_study(tmp_path, edit("[study]\n", "[study]\nfront_sizes = 3\n")))
    assert "front_sizes" in str(e.value)


def test_every_named_sampler_builds_and_an_injected_one_is_used(tmp_path, study_file):
    spec = load_study(study_file).with_overrides(trials=3)
    for name, make in SAMPLERS.items():
        if name == "gp" and importlib.util.find_spec("torch") is None:  # optional: see the test below
            continue
        s = spec.with_overrides(strategy="hybrid") if name == "hvi" else spec  # the hybrid's own (test_hvi.py)
        assert isinstance(make(s, 0), optuna.samplers.BaseSampler), name

    class Counting(optuna.samplers.RandomSampler):
        calls = 0

        def sample_independent(self, *a, **k):
            Counting.calls += 1
            return super().sample_independent(*a, **k)

    res = dse.run(spec, sampler=Counting(seed=0))
    assert res["finished"] == 3 and Counting.calls >= 3 * len(spec.space.searched())
    with pytest.raises(UsageError, match="sampler: a sampler instance runs in this process only"):
        dse.run(spec, sampler=Counting(seed=0), workers=2)


def test_the_gp_sampler_without_torch_is_refused_with_what_to_do(study_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as if not installed: importing it raises ImportError
    spec = load_study(study_file).with_overrides(trials=2, sampler="gp")
    with pytest.raises(UsageError, match=r"sampler 'gp': Optuna's GPSampler needs torch.*pip install torch"):
        SAMPLERS["gp"](spec, 0)
    with pytest.raises(UsageError, match="^sampler 'gp'"):  # its own message, not the storage's
        dse.run(spec)
    # a study searched with another sampler, then named 'gp' in its file: it can still be read without torch.
    # (trained with torch's absence undone: scipy looks torch up in sys.modules and fails on the None placed
    # there, so the runs failed whenever the cache did not hold them already -- an order-dependent test)
    monkeypatch.undo()
    dse.run(spec.with_overrides(sampler="random"))
    monkeypatch.setitem(sys.modules, "torch", None)
    assert len(dse.open_study(spec).points()) == 2


def test_a_sampler_that_is_neither_a_name_nor_an_optuna_sampler_is_refused(study_file):
    spec = load_study(study_file).with_overrides(trials=2)
    with pytest.raises(UsageError, match="^sampler: 'bogus' is not a sampler"):
        dse.run(spec, sampler="bogus")
    with pytest.raises(UsageError, match="sampler: an optuna.samplers.BaseSampler instance"):
        dse.run(spec, sampler=optuna.samplers.RandomSampler)  # the class, not an instance


def _grid_study(tmp_path, trials):
    text = edit('rows = [8, 16, 32]\ncols = [8, 16, 32]\nbandwidth_gbps = [6.4, 25.6]', 'rows = [8, 16, 32]',
                edit('sampler = "nsga2"', 'sampler = "grid"', edit("trials = 12", f"trials = {trials}")))
    return text, load_study(write_study(tmp_path, text))  # a grid of 2 x 3 x 2 = 12 points


def _points(spec, tmp_path, name="tiny.db"):
    study = optuna.load_study(study_name=spec.name, storage=f"sqlite:///{tmp_path / name}")
    return study, [tuple(sorted(t.params.items())) for t in study.trials]


@pytest.mark.parametrize("trials", [20, 12])
def test_the_grid_sampler_ends_the_run_when_its_grid_is_done(tmp_path, trials):
    """Optuna's grid sampler stops the study once every point is tried; a run of one trial at a time used to
    forget it and repeat points up to the trial budget. The run ends with the grid (the 12 points of this space,
    each once) and says why; with a budget of exactly the grid, the summary does not ask for a larger one."""
    from dse.search.runner import run_study
    from dse.search.strategies.joint import Joint

    text, spec = _grid_study(tmp_path, trials)
    res = run_study(spec)
    assert res["finished"] == 12
    study, pts = _points(spec, tmp_path)
    assert len(set(pts)) == 12  # no point twice
    if trials > 12:
        assert res["exhausted"] and not res["covered"] and res["stop_reason"] == Joint.GRID_DONE
        with dse.open_study(spec) as s:
            assert s.status()["ended_early"] == Joint.GRID_DONE
    else:
        assert not res["exhausted"] and res["covered"] == Joint.GRID_DONE  # the stopping signal: nothing left
    nsga = load_study(write_study(tmp_path, text.replace('"grid"', '"random"'), name="r.toml"))
    assert Joint.covered(nsga, study) is None  # a study another sampler searches is never "covered" this way


def test_a_resumed_grid_run_tries_the_points_left_and_an_interrupted_one(tmp_path):
    """The grid sampler's own numbering of points follows its seed, which dse derives from the worker and the
    run's history: a resumed run counted the first run's points as others and ended with points untried
    while saying all were. Points are told by their values now; and an interrupted trial's point (never
    evaluated) is not counted as tried."""
    from optuna.trial import TrialState

    from dse.search.runner import run_study
    from dse.search.strategies.joint import Joint

    _, spec = _grid_study(tmp_path, 20)
    assert run_study(replace(spec, trials=4))["finished"] == 4
    study, pts = _points(spec, tmp_path)
    first = study.trials[0]
    grid = spec.space.grid()
    untried = next(p for p in itertools.product(*grid.values())
                   if tuple(sorted(zip(grid, p))) not in set(pts))
    study.add_trial(optuna.trial.create_trial(  # what a Ctrl-C leaves: failed, "interrupted", never evaluated
        state=TrialState.FAIL, params=dict(zip(grid, untried)), distributions=first.distributions,
        user_attrs={"fail_reason": "interrupted (Ctrl-C)"}))
    res = run_study(spec)
    study, pts = _points(spec, tmp_path)
    done = [tuple(sorted(t.params.items())) for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(set(done)) == 12 and len(done) == 12  # every point once, the interrupted one included
    assert tuple(sorted(zip(grid, untried))) in done
    assert res["stop_reason"] == Joint.GRID_DONE


def test_two_workers_on_a_grid_try_every_point_and_say_so(tmp_path):
    from optuna.trial import TrialState

    from dse.search.strategies.joint import Joint

    _, spec = _grid_study(tmp_path, 20)
    res = dse.run(spec, workers=2, quiet=True)
    assert res["exhausted"] and not res["worker_errors"]
    with dse.open_study(spec) as s:
        trials = s.optuna.trials
        done = [tuple(sorted(t.params.items())) for t in trials if t.state == TrialState.COMPLETE]
        assert s.status()["ended_early"] == Joint.GRID_DONE
    # every point once (a trial that finds no point left is pruned: test_worker_races.py); on a failure, every
    # trial: number, state, worker, grid point, start and end (a loaded CI run once gave 14 trials, two points
    # twice: see test_two_workers_ending_the_last_two_points_at_once_neither_starts_another)
    assert len(set(done)) == 12 and len(done) == 12, "\n".join(
        f"{t.number} {t.state.name} {t.user_attrs.get('worker')} {t.system_attrs.get('grid_id')} "
        f"{sorted(t.params.items())} {t.datetime_start} {t.datetime_complete}" for t in trials)


@pytest.mark.parametrize("done", [0, 7, 10])
def test_workers_choosing_grid_points_at_once_from_one_reading_take_different_points(tmp_path, done):
    """Two workers each read the study, then each give its new trial a point: a trial took the first untried
    point at or after its number, so two trials whose numbers straddled a gap took the same point (two
    repeats in a loaded process-test run, 14 trials on the 12-point grid). Now one reading gives every trial
    choosing at once its own point, and a trial already holding one (its grid_id) is skipped."""
    from optuna.trial import TrialState

    from dse.search.samplers import make_sampler
    from dse.search.study import open_storage

    _, spec = _grid_study(tmp_path, 20)
    sampler = make_sampler(spec, seed=99)
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'g.db'}"), sampler=sampler)
    grid = spec.space.grid()
    dists = {k: optuna.distributions.CategoricalDistribution(v) for k, v in grid.items()}
    order = sampler._all_grids  # the study seed's order
    taken = [0, 2, 3, 5, 8, 9, 11][:done]  # a gappy set of complete points
    for i in taken:
        study.add_trial(optuna.trial.create_trial(params=dict(zip(sampler._param_names, order[i])),
                                                  distributions=dists, values=[0.0]))
    st = study._storage
    mine = [st.get_trial(st.create_new_trial(study._study_id)) for _ in range(3)]  # three workers' new trials
    reading = st.get_all_trials(study._study_id, deepcopy=False)  # what each read before any chose
    st.get_all_trials = lambda *a, **k: reading
    for t in reversed(mine):  # in any order: each from the same reading
        sampler.before_trial(study, t)
    del st.get_all_trials
    got = [st.get_trial(t._trial_id).system_attrs["grid_id"] for t in mine]
    left = [i for i in range(12) if i not in taken]
    assert got == left[:3]  # distinct, the first untried ones in order
    # a fourth trial reading the study now skips the points the three hold
    fourth = st.get_trial(st.create_new_trial(study._study_id))
    sampler.before_trial(study, fourth)
    assert st.get_trial(fourth._trial_id).system_attrs["grid_id"] == left[3]
    assert all(t.state == TrialState.RUNNING for t in st.get_all_trials(study._study_id) if t.number >= done)


@pytest.mark.parametrize("other", ["alive", "dead"])
def test_two_workers_ending_the_last_two_points_at_once_neither_starts_another(tmp_path, other):
    """Two workers finish the grid's last two points at the same moment: each one's sampler, as its trial ends,
    reads the other's trial still running. Each went on and started one more trial with nothing left, which
    repeated a point (a loaded CI run: 14 trials on the 12-point grid). Now a worker asks before it starts a
    trial: while a live worker's running trial holds the last point it waits (that trial ends it, or fails
    and is retried); a point held by a trial whose process died is free, to be taken over."""
    from optuna.trial import TrialState

    from dse.search.runguard import owner
    from dse.search.samplers import make_sampler
    from dse.search.study import open_storage

    _, spec = _grid_study(tmp_path, 20)
    sampler = make_sampler(spec, seed=3)
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'g.db'}"), sampler=sampler)
    dists = {k: optuna.distributions.CategoricalDistribution(v) for k, v in spec.space.grid().items()}
    order = sampler._all_grids
    for p in order[:10]:
        study.add_trial(optuna.trial.create_trial(params=dict(zip(sampler._param_names, p)),
                                                  distributions=dists, values=[0.0]))
    st = study._storage
    mine = []
    # this worker's trial and the other's (a process that is gone: a pid no process has, this host)
    records = [owner(), owner() if other == "alive" else owner().split(":")[0] + ":999999999:0"]
    for gid, who in zip((10, 11), records):
        tid = st.create_new_trial(study._study_id)
        st.set_trial_system_attr(tid, "grid_id", gid)
        for k, v in zip(sampler._param_names, order[gid]):
            st.set_trial_param(tid, k, dists[k].to_internal_repr(v), dists[k])
        st.set_trial_user_attr(tid, "worker", who)
        mine.append(st.get_trial(tid))
    stops = []
    study.stop = lambda: stops.append(True)  # (Optuna's own refuses outside optimize)
    sampler.after_trial(study, mine[0], TrialState.COMPLETE, [0.0])  # the other trial still running
    st.set_trial_state_values(mine[0]._trial_id, TrialState.COMPLETE, [0.0])
    assert stops == [] and sampler.outlook(study) == ("wait" if other == "alive" else "free")
    if other == "alive":
        st.set_trial_state_values(mine[1]._trial_id, TrialState.COMPLETE, [0.0])
        assert sampler.outlook(study) == "done"


def test_a_retry_that_completes_the_grid_ends_the_run(tmp_path):
    """A queued retry (a dead worker's trial) evaluated by the runner may be the grid's last point: the run
    ends there instead of asking the sampler for one more, which would repeat a point."""
    from optuna.trial import TrialState

    from dse.search.runguard import queue
    from dse.search.runner import run_study

    _, spec = _grid_study(tmp_path, 20)
    assert run_study(replace(spec, trials=11))["finished"] == 11
    study, pts = _points(spec, tmp_path)
    grid = spec.space.grid()
    last = next(p for p in itertools.product(*grid.values()) if tuple(sorted(zip(grid, p))) not in set(pts))
    queue(study, dict(zip(grid, last)), retry_of=10)  # as the dead-worker recovery queues a retry
    res = run_study(spec)
    study, pts = _points(spec, tmp_path)
    done = [p for p, t in zip(pts, study.trials) if t.state == TrialState.COMPLETE]
    assert len(done) == len(set(done)) == 12 and res["exhausted"]


def test_the_hybrids_main_study_builds_no_grid_of_the_whole_space(tmp_path):
    """With sampler = "grid" the hybrid walks its training settings itself; its main study's sampler never
    proposes, and a grid sampler there built every training x hardware point at each open of the study
    (27.6 s of a run on a 288 x 43,200 space)."""
    from dse.search.samplers import make_sampler

    text = with_strategy(edit('sampler = "nsga2"', 'sampler = "grid"'), "hybrid", front_size=3)
    spec = load_study(write_study(tmp_path, text))
    assert isinstance(make_sampler(spec, 0), optuna.samplers.RandomSampler)
    joint = load_study(write_study(tmp_path, edit('sampler = "nsga2"', 'sampler = "grid"'), name="j.toml"))
    assert isinstance(make_sampler(joint, 0), optuna.samplers.GridSampler)
