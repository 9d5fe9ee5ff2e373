"""dse's RDB storage lists a study's trials exactly as Optuna's own listing does (dse.search.rdb), on
SQLite and on PostgreSQL: every field of every trial, for every filter Optuna's trial cache asks with; it
reads one trial as Optuna's get_trial does, and stores a trial created from a template as Optuna does."""

import math
import os
import time

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from dse.search.rdb import FastRDBStorage
from dse.search.study import open_storage

PG = os.environ.get("DSE_TEST_POSTGRES")
if not PG and os.environ.get("CI"):
    raise RuntimeError("CI must run the PostgreSQL tests: .ci/run starts a server and sets DSE_TEST_POSTGRES")


def _fill(storage, name):
    """A study with a trial of every kind: complete (finite and infinite values), failed, pruned with
    intermediate values, running, waiting; parameters of every distribution, attributes of every JSON type."""
    study = optuna.create_study(study_name=name, storage=storage, directions=["minimize", "maximize"])
    other = optuna.create_study(study_name=name + "_other", storage=storage)  # its trials must not show
    other.tell(other.ask({"x": FloatDistribution(0, 1)}), 0.5)
    dists = {"lr": FloatDistribution(1e-4, 1e-1, log=True), "frac": FloatDistribution(0.0, 1.0, step=0.25),
             "width": IntDistribution(8, 64, step=8), "depth": IntDistribution(1, 100, log=True),
             "mode": CategoricalDistribution(["a", 3, 2.5, None, True]), "x": FloatDistribution(-1, 1)}
    for i in range(12):
        t = study.ask(dists)
        t.set_user_attr("metrics", {"speedup": 1.5 + i, "nested": [1, {"a": None}], "s": "é"})
        t.set_user_attr("n", i)
        study._storage.set_trial_system_attr(t._trial_id, "constraints", [0.0, -1.5 * i])
        if i % 4 == 0:
            study.tell(t, [float(i), 2.0 * i])
        elif i % 4 == 1:
            study.tell(t, [math.inf, -math.inf])
        elif i % 4 == 2:
            for step, v in ((0, 0.5), (3, math.nan), (7, -math.inf)):  # (Trial.report is single-objective)
                storage.set_trial_intermediate_value(t._trial_id, step, v)
            study.tell(t, state=TrialState.PRUNED)
        elif i < 9:
            study.tell(t, state=TrialState.FAIL)
        # i == 11 stays running
    study.enqueue_trial({"x": 0.25})  # waiting
    return study._study_id


def _fields(t):
    """Every field of a FrozenTrial, NaN made comparable (attribute order is the database's, as in Optuna)."""
    d = dict(vars(t))
    d["intermediate_values"] = {k: "nan" if math.isnan(v) else v for k, v in t.intermediate_values.items()}
    return d


def _same(storage_url, name):
    ours, theirs = FastRDBStorage(storage_url), RDBStorage(storage_url)
    try:
        sid = _fill(ours, name)
        first = min(t._trial_id for t in theirs.get_all_trials(sid))  # (a shared server's ids start anywhere)
        for states in (None, (TrialState.COMPLETE,), (TrialState.RUNNING, TrialState.WAITING, TrialState.FAIL)):
            for included, above in ((set(), -1), ({first + 1, first + 3, 10**9}, -1), (set(), first + 5),
                                    ({first, first + 2, first + 7}, first + 4)):
                a = theirs._get_trials(sid, states, included, above)
                b = ours._get_trials(sid, states, included, above)
                assert [t.number for t in a] == [t.number for t in b]
                assert a, (states, included, above)  # every filter here lists something
                for x, y in zip(a, b):
                    assert _fields(x) == _fields(y)  # every field
                    assert x._trial_id == y._trial_id and x.distributions == y.distributions
                    assert list(x.params.items()) == list(y.params.items())  # order and values...
                    assert [type(v) for v in x.params.values()] == [type(v) for v in y.params.values()]  # ...types
                    assert x.datetime_start == y.datetime_start and x.datetime_complete == y.datetime_complete
        # the study's own listing, through Optuna's trial cache, on a storage of ours
        study = optuna.load_study(study_name=name, storage=ours)
        assert list(map(_fields, study.get_trials(deepcopy=False))) == list(map(
            _fields, optuna.load_study(study_name=name, storage=theirs).get_trials()))
        assert {t.state for t in study.get_trials()} == {TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED,
                                                         TrialState.RUNNING, TrialState.WAITING}
        # more unfinished trials than a database takes bound variables in one statement (SQLite 32766)
        many = set(range(first, first + 40_000, 3))
        above = first + 40_000
        a, b = theirs._get_trials(sid, None, many, above), ours._get_trials(sid, None, many, above)
        assert a and list(map(_fields, a)) == list(map(_fields, b))
        with pytest.raises(KeyError):
            ours._get_trials(10**6, None, set(), -1)
        # one trial read alone, as Optuna's get_trial reads it
        for t in theirs.get_all_trials(sid):
            assert _fields(ours.get_trial(t._trial_id)) == _fields(theirs.get_trial(t._trial_id))
        with pytest.raises(KeyError):
            ours.get_trial(first + 10**6)
    finally:
        ours.engine.dispose()
        theirs.engine.dispose()


def _race(url, name):
    """Another connection's write right after the listing's SELECT of trials (an engine hook makes it
    deterministic): the listing gives what Optuna's gives, for a running trial that finishes meanwhile and a
    waiting one popped meanwhile, asked by state (the other tables are read by id, not by state)."""
    import sqlalchemy

    x = FloatDistribution(0, 1)
    for states, act in (((TrialState.RUNNING,), lambda study, running: study.tell(running[0], 0.9)),
                        ((TrialState.WAITING,), lambda study, running: study.ask())):
        got = []
        for cls in (RDBStorage, FastRDBStorage):
            # the writer as dse opens a storage (SQLite in WAL mode: a reader blocks no writer)
            writer, reader = open_storage(url), cls(url)
            study = optuna.create_study(study_name=f"{name}_{len(got)}_{states[0].name}", storage=writer,
                                        sampler=optuna.samplers.RandomSampler(seed=0))
            running = []
            for i in range(3):
                t = study.ask({"x": x})
                t.set_user_attr("a", i)
                running.append(t)
            study.enqueue_trial({"x": 0.5}, user_attrs={"queued_by": "me"})
            fired = []

            def after(conn, cursor, statement, *a):
                if not fired and statement.lstrip().startswith("SELECT trials.trial_id") \
                        and "FROM trials" in statement:
                    fired.append(1)
                    act(study, running)

            sqlalchemy.event.listen(reader.engine, "after_cursor_execute", after)
            try:
                got.append([(t.number, t.state, t.values, t.params, t.user_attrs, t.system_attrs)
                            for t in reader._get_trials(study._study_id, states, set(), -1)])
            finally:
                sqlalchemy.event.remove(reader.engine, "after_cursor_execute", after)
                reader.engine.dispose()
                writer.engine.dispose()
            assert fired
        assert got[0] == got[1], states


def _templates():
    """Trials to create from templates (how the hybrid enters its points, and Optuna enqueues and retries):
    every state, single and two objectives, infinite values, intermediate values, nested attributes."""
    from optuna.trial import create_trial

    dists = {"lr": FloatDistribution(1e-4, 1e-1, log=True), "width": IntDistribution(8, 64, step=8),
             "mode": CategoricalDistribution(["a", 3, 2.5, None, True]), "x": FloatDistribution(-1, 1)}
    two, one = [], []
    for i, state in enumerate((TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING, TrialState.FAIL,
                               TrialState.PRUNED, TrialState.COMPLETE)):
        params = {"lr": 10 ** (-1 - i / 3), "width": 8 * (i + 1), "mode": ["a", 3, 2.5, None, True, "a"][i],
                  "x": i / 10}
        if i == 5:
            params.pop("width")  # a trial without one of the knobs
        kw = dict(state=state, params=params, distributions={k: dists[k] for k in params},
                  user_attrs={"metrics": {"speedup": 1.5 + i, "nested": [1, {"a": None}], "s": "é"}, "n": i},
                  system_attrs={"constraints": [0.0, -1.5 * i]},
                  intermediate_values={0: 0.5, 3: math.nan, 7: -math.inf} if state == TrialState.PRUNED else {})
        done = state == TrialState.COMPLETE
        two.append(create_trial(values=[float(i), math.inf if i else -2.0] if done else None, **kw))
        one.append(create_trial(value=float(i) if done else None, **kw))
    return two, one


def _created(url, name):
    """Trials created from templates by dse's storage are stored as Optuna's own would store them: the same
    fields read back by Optuna's storage; a parameter whose distribution is incompatible with the study's
    earlier records is refused by both and leaves no trial."""
    from optuna.trial import create_trial

    listed = []
    two, one = _templates()  # (one set for both: a template carries its start time)
    for cls in (RDBStorage, FastRDBStorage):
        st = cls(url)
        try:
            got = []
            for directions, templates in ((["minimize", "maximize"], two), (["minimize"], one)):
                sid = st.create_new_study(
                    [optuna.study.StudyDirection.MINIMIZE if d == "minimize" else optuna.study.StudyDirection.MAXIMIZE
                     for d in directions], f"{name}_{cls.__name__}_{len(directions)}")
                for t in templates:
                    st.create_new_trial(sid, template_trial=t)
                for bad in (FloatDistribution(0, 1), CategoricalDistribution(["a", 3])):  # kind; choices
                    with pytest.raises(ValueError):
                        st.create_new_trial(sid, template_trial=create_trial(
                            state=TrialState.WAITING, params={"mode": 0.5 if bad.__class__ is FloatDistribution
                                                              else "a"}, distributions={"mode": bad}))
                # another study takes any distribution for the name
                other = st.create_new_study([optuna.study.StudyDirection.MINIMIZE],
                                            f"{name}_{cls.__name__}_{len(directions)}_other")
                st.create_new_trial(other, template_trial=create_trial(
                    state=TrialState.WAITING, params={"mode": 0.5}, distributions={"mode": FloatDistribution(0, 1)}))
                reader = RDBStorage(url)
                try:
                    got.append([reader.get_trial(t._trial_id) for t in reader.get_all_trials(sid)] +
                               reader.get_all_trials(other))
                finally:
                    reader.engine.dispose()
            listed.append(got)
        finally:
            st.engine.dispose()
    for a, b in zip(*listed):
        assert len(a) == len(b) == 7
        for x, y in zip(a, b):
            fx, fy = _fields(x), _fields(y)
            fx.pop("_trial_id"), fy.pop("_trial_id")
            assert fx == fy
            assert list(x.params.items()) == list(y.params.items())
            assert [type(v) for v in x.params.values()] == [type(v) for v in y.params.values()]


def test_a_deleted_studys_parameters_do_not_bind_the_next_study_given_its_id(tmp_path):
    """SQLite gives a deleted study's id to the next study: the distributions remembered for the first must not
    judge the second's trials (Optuna's storage accepts a categorical there after a float)."""
    from optuna.study import StudyDirection
    from optuna.trial import create_trial

    url = f"sqlite:///{tmp_path / 'd.db'}"
    for cls in (RDBStorage, FastRDBStorage):
        st = cls(url)
        try:
            def make(name, dist, value):
                sid = st.create_new_study([StudyDirection.MINIMIZE], name)
                for _ in range(2):  # (the second creation reads the first's record)
                    st.create_new_trial(sid, template_trial=create_trial(
                        state=TrialState.WAITING, params={"x": value}, distributions={"x": dist}))
                return sid

            first = make(f"a_{cls.__name__}", FloatDistribution(0, 1), 0.5)
            st.delete_study(first)
            again = make(f"b_{cls.__name__}", CategoricalDistribution(["u", "v"]), "u")
            assert again == first  # the id given again
            assert [t.params for t in st.get_all_trials(again)] == [{"x": "u"}] * 2
        finally:
            st.engine.dispose()


def test_the_listing_equals_optunas_on_sqlite(tmp_path):
    _same(f"sqlite:///{tmp_path / 'l.db'}", "listing")
    _race(f"sqlite:///{tmp_path / 'l.db'}", "race")
    _created(f"sqlite:///{tmp_path / 'l.db'}", "created")


@pytest.mark.postgres
@pytest.mark.skipif(not PG, reason="DSE_TEST_POSTGRES is not set (CI sets it; see .ci/run)")
def test_the_listing_equals_optunas_on_postgresql():
    _same(PG, f"listing_{os.getpid()}_{int(time.time() * 1000) % 10**8}")
    _race(PG, f"race_{os.getpid()}_{int(time.time() * 1000) % 10**8}")
    _created(PG, f"created_{os.getpid()}_{int(time.time() * 1000) % 10**8}")


def test_dse_opens_a_sqlite_study_with_the_faster_listing(tmp_path):  # (PostgreSQL: the same _rdb_storage)
    st = open_storage(f"sqlite:///{tmp_path / 'o.db'}")
    try:
        assert isinstance(st, FastRDBStorage)
    finally:
        st.engine.dispose()
