"""Several workers on one study: exact budgets, a SIGKILLed worker's trial retried, signals, resume.

The journal-file tests need no server. The PostgreSQL tests run when DSE_TEST_POSTGRES holds a URL (CI
starts a server on loopback and sets it, see .ci/run); elsewhere they are skipped.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time

import optuna
import pytest
from optuna.trial import TrialState

from dse.search.study import budget_state, close_storage, close_study, open_study
from dse.search.studyfile import load_study
from studyfiles import edit, with_strategy

SLOW_STUDY = """
[study]
name = "{name}"
sampler = "random"
seed = 1
trials = {trials}
seeds = 1

[workload]
models = ["resnet18"]
dataset = "cifar10"
batch = 64
dataset_size = 5000
epochs = 2

[training]
task = "digits"
network = "cnn"
epochs = 3

[reference]
rows = 16
cols = 16

[space.training]
pred_width = {{ low = 1, high = 1000 }}   # every trial trains a new surrogate setting (about a second)

[space.hardware]
rows = [8, 16, 32]

[[objectives]]
metric = "accuracy_drop"

[[objectives]]
metric = "speedup"
"""


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """A fresh surrogate cache per test, so that trials really train (a cache hit takes microseconds)."""
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path / "cache"))


def _study(tmp_path, name="slow", trials=6):
    p = tmp_path / f"{name}.toml"
    p.write_text(SLOW_STUDY.format(name=name, trials=trials))
    return p


def _cli(*args, env=None):
    return subprocess.Popen([sys.executable, "-m", "dse.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env or os.environ.copy())


@contextlib.contextmanager
def _reaped(*procs):
    """On a failure inside the block, the processes still running are killed and waited for: no worker is
    left running into the next test, and the failure reported is the test's own."""
    try:
        yield
    except BaseException:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
        raise


def _wait_running(spec, storage, timeout=60):
    t0 = time.time()
    st = None
    try:
        while time.time() - t0 < timeout:
            if st is None:
                try:
                    st = open_study(spec, storage, create=False)
                except Exception:  # not created yet
                    time.sleep(0.2)
                    continue
            for t in st.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                if "worker" in t.user_attrs:
                    return t
            time.sleep(0.1)
    finally:
        if st is not None:
            close_study(st)  # a study opened per poll would leave a database connection per poll
    raise AssertionError("no trial started")


def _kill_mid_trial(spec, storage, wait, outer=False, attempts=20):
    """SIGKILL the worker of a trial ``wait(spec, storage)`` found running, *while* it runs, and return that
    trial (``outer``: a training setting of the hybrid's study of them). The worker is stopped (SIGSTOP) and
    the trial read again before the kill: a trial that ended between the first read and the kill (a window of
    milliseconds in a second's training) would otherwise be taken for the killed one, and the test would fail
    on a completed trial. If it ended, the worker goes on (SIGCONT) and another running trial is waited for.
    The study is opened before any worker is stopped (opening a journal takes its lock, which the stopped
    worker may hold), and a stopped worker is always let go or killed."""
    from dse.search.study import open_storage, storage_url

    store, study = open_storage(storage_url(spec, storage)), None
    try:
        for _ in range(attempts):
            victim = wait(spec, storage)
            if study is None:
                study = optuna.load_study(study_name=f"{spec.name}.training" if outer else spec.name, storage=store)
            pid = int(victim.user_attrs["worker"].split(":")[1])
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:  # the worker has ended since: so has its trial
                continue
            try:
                running = study.get_trials(deepcopy=False)[victim.number].state == TrialState.RUNNING
            except BaseException:
                os.kill(pid, signal.SIGCONT)
                raise
            if running:
                os.kill(pid, signal.SIGKILL)
                return victim
            os.kill(pid, signal.SIGCONT)
    finally:
        close_storage(store)
    raise AssertionError(f"no trial still running when its worker was stopped, in {attempts} tries")


def _check_exact(spec, storage, budget, killed=None):
    st = open_study(spec, storage, create=False)
    trials = st.get_trials()
    numbers = [t.number for t in trials]
    assert numbers == list(range(len(trials)))  # no duplicate, no gap
    assert budget_state(st)["done"] == budget
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == budget
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    if killed is not None:
        k = next(t for t in trials if t.number == killed.number)
        assert k.state == TrialState.FAIL
        retries = [t for t in trials if t.user_attrs.get("retry_of") == killed.number
                   or t.system_attrs.get("failed_trial") == killed.number]
        assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
        # the retry re-runs the same parameters (those sampled before the kill; the rest are sampled anew)
        assert k.params.items() <= retries[0].params.items()
    return st


@pytest.mark.parametrize("asked_by", ["option", "file"])
def test_two_local_workers_on_a_journal_reach_the_budget_exactly(tmp_path, asked_by):
    f = _study(tmp_path, trials=8)
    if asked_by == "file":  # [study] workers = 2: `dse run FILE` starts two workers without the option
        f.write_text(f.read_text().replace("[workload]", "workers = 2\n\n[workload]", 1))
    p = _cli("run", str(f), "--quiet", *(["--workers", "2"] if asked_by == "option" else []))
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    spec = load_study(f)
    assert (tmp_path / "slow.journal").exists()
    st = _check_exact(spec, None, 8)
    owners = {t.user_attrs["worker"] for t in st.get_trials() if "worker" in t.user_attrs}
    assert len(owners) == 2  # both workers took trials


def test_each_worker_reports_only_the_trials_it_ran(tmp_path):
    """`dse worker`'s progress line names a trial this worker completed, not the study's latest (another
    worker's, which both printed)."""
    f = _study(tmp_path, trials=8)
    url = f"journal:///{tmp_path / 'slow.journal'}"
    procs = [_cli("worker", str(f), "--storage", url, "--index", str(i)) for i in range(2)]
    with _reaped(*procs):
        errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    st = _check_exact(load_study(f), url, 8)
    ran = {t.number: int(t.user_attrs["worker"].split(":")[1]) for t in st.get_trials()
           if t.state == TrialState.COMPLETE}
    reported = [[int(n) for n in re.findall(r"trial (\d+) complete", err)] for err in errs]
    assert sum(map(len, reported)) >= 2, errs
    for p, numbers in zip(procs, reported):
        assert all(ran[n] == p.pid for n in numbers), (p.pid, numbers, ran)


def test_a_sigkilled_local_worker_has_its_trial_retried(tmp_path):
    f = _study(tmp_path, trials=6)
    spec = load_study(f)
    p = _cli("run", str(f), "--workers", "2", "--quiet")
    with _reaped(p):
        victim = _kill_mid_trial(spec, f"journal:///{tmp_path / 'slow.journal'}", _wait_running)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    st = _check_exact(spec, None, 6, killed=victim)
    # its reason, for dse status (it had none: "failed 1 x no reason recorded")
    reason = st.get_trials()[victim.number].user_attrs.get("fail_reason", "")
    assert reason.startswith("interrupted: its worker (") and "died while running it" in reason, reason


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_keep_completed_trials_and_resume(tmp_path, sig):
    f = _study(tmp_path, trials=8)
    spec = load_study(f)
    p = _cli("run", str(f), "--quiet")
    t0 = time.time()
    st = None
    while time.time() - t0 < 120:  # wait until one trial is complete and the next one runs
        try:
            st = open_study(spec, None, create=False)
            states = [t.state for t in st.get_trials(deepcopy=False)]
            if 1 <= states.count(TrialState.COMPLETE) <= 4 and states[-1] == TrialState.RUNNING:
                break
        except Exception:
            pass
        time.sleep(0.1)
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, (out, err)
    assert "interrupted" in err and "Traceback" not in err
    assert "dse: interrupted" not in err  # the run says it in its own words, once
    st = open_study(spec, None, create=False)
    trials = st.get_trials()
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    done_before = budget_state(st)["done"]
    assert 1 <= done_before < 8
    # the trial running when the signal came is failed as interrupted (none, if it came between trials)
    interrupted = [t for t in trials if t.state == TrialState.FAIL]
    assert len(interrupted) <= 1
    # (its reason is "interrupted ...", or none when the signal hit Optuna's own code around the objective;
    # either way it does not count toward the budget, which the resume below checks)
    assert all(t.user_attrs.get("fail_reason", "interrupted").startswith("interrupted") for t in interrupted)
    p = _cli("run", str(f), "--quiet")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    _check_exact(spec, None, 8)


PG = os.environ.get("DSE_TEST_POSTGRES")
if not PG and os.environ.get("CI"):
    raise RuntimeError("CI must run the PostgreSQL tests: .ci/run starts a server and sets DSE_TEST_POSTGRES")
needs_pg = pytest.mark.skipif(not PG, reason="DSE_TEST_POSTGRES is not set (CI sets it; see .ci/run)")


def _fresh_pg_name(tag):
    return f"{tag}_{os.getpid()}_{int(time.time() * 1000) % 10**8}"


@needs_pg
@pytest.mark.postgres
def test_three_postgres_workers_reach_the_budget_exactly(tmp_path):
    name = _fresh_pg_name("pg3")
    f = _study(tmp_path, name=name, trials=9)
    spec = load_study(f)
    close_study(open_study(spec, PG, create=True))  # created once, as a coordinator would
    procs = [_cli("worker", str(f), "--storage", PG, "--index", str(i), "--quiet") for i in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "s3cret" not in out + err
    st = _check_exact(spec, PG, 9)
    assert len({t.user_attrs["worker"] for t in st.get_trials() if "worker" in t.user_attrs}) >= 2
    assert st.get_trials(states=(TrialState.COMPLETE,))


@needs_pg
@pytest.mark.postgres
def test_a_sigkilled_postgres_worker_has_its_trial_retried(tmp_path):
    name = _fresh_pg_name("pgkill")
    f = _study(tmp_path, name=name, trials=6)
    spec = load_study(f)
    victim = _three_workers_one_killed(f, spec, _wait_running)
    _check_exact(spec, PG, 6, killed=victim)


def _three_workers_one_killed(f, spec, wait, outer=False):
    """Three `dse worker` processes on PostgreSQL (heartbeat 1 s); the one running the trial ``wait``
    returns is SIGKILLed while it runs (``outer``: a training setting of the hybrid); the others must finish
    cleanly, never printing the password."""
    close_study(open_study(spec, PG, create=True))
    procs = [_cli("worker", str(f), "--storage", PG, "--index", str(i), "--quiet", "--heartbeat", "1")
             for i in range(3)]
    with _reaped(*procs):
        victim = _kill_mid_trial(spec, PG, wait, outer=outer)
    pid = int(victim.user_attrs["worker"].split(":")[1])
    for p in procs:
        out, err = p.communicate(timeout=300)
        if p.pid != pid:
            assert p.returncode == 0, err
            assert "s3cret" not in out + err
    return victim


def _hybrid_study(tmp_path, name="hyb", trials=8, front_size=2):
    p = tmp_path / f"{name}.toml"
    text = with_strategy(SLOW_STUDY.format(name=name, trials=trials), "hybrid", front_size=front_size)
    p.write_text(edit("rows = [8, 16, 32]", "rows = [8, 16, 32]\ncols = [8, 16, 32]", text))
    return p


def _check_hybrid(spec, storage, budget, killed=None):
    """The main study meets its budget exactly; every training setting was trained (completed) once."""
    _check_exact(spec, storage, budget)
    from dse.search.study import open_storage, storage_url

    outer = optuna.load_study(study_name=f"{spec.name}.training", storage=open_storage(storage_url(spec, storage)))
    trained = [t for t in outer.get_trials() if t.user_attrs.get("trained") and t.state == TrialState.COMPLETE]
    keys = [tuple(sorted(t.params.items())) for t in trained]
    assert len(keys) == len(set(keys)), "a training setting was trained twice"
    main = open_study(spec, storage, create=False)
    by_setting = {t.user_attrs["training_trial"] for t in main.get_trials() if "training_trial" in t.user_attrs}
    assert by_setting <= {t.number for t in trained}  # every entry comes from one completed setting
    if killed is not None:
        k = next(t for t in outer.get_trials() if t.number == killed.number)
        assert k.state == TrialState.FAIL
        retry = [t for t in outer.get_trials() if t.system_attrs.get("failed_trial") == k.number
                 or t.user_attrs.get("retry_of") == k.number]
        assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE and retry[0].params == k.params
    return outer


def test_two_local_workers_run_the_hybrid_strategy_to_the_budget_exactly(tmp_path):
    f = _hybrid_study(tmp_path, trials=8)
    p = _cli("run", str(f), "--workers", "2", "--quiet")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    spec = load_study(f)
    outer = _check_hybrid(spec, f"journal:///{tmp_path / 'hyb.journal'}", 8)
    owners = {t.user_attrs["worker"] for t in outer.get_trials() if t.user_attrs.get("trained")}
    assert len(owners) == 2  # both workers trained settings


def _wait_training(spec, storage, timeout=120):
    from dse.search.study import open_storage

    t0 = time.time()
    store, outer = open_storage(storage), None  # one storage for every poll: no connection left per poll
    try:
        while time.time() - t0 < timeout:
            if outer is None:
                try:
                    outer = optuna.load_study(study_name=f"{spec.name}.training", storage=store)
                except KeyError:  # not created yet
                    time.sleep(0.2)
                    continue
            for t in outer.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                if t.user_attrs.get("trained"):
                    return t
            time.sleep(0.05)
    finally:
        close_storage(store)
    raise AssertionError("no training setting started")


@needs_pg
@pytest.mark.postgres
def test_three_postgres_workers_on_a_hybrid_study_one_killed_mid_training(tmp_path):
    name = _fresh_pg_name("pghyb")
    f = _hybrid_study(tmp_path, name=name, trials=12, front_size=1)  # 12 settings: work left after the kill
    spec = load_study(f)
    victim = _three_workers_one_killed(f, spec, _wait_training, outer=True)
    _check_hybrid(spec, PG, 12, killed=victim)


def test_worker_processes_get_the_storage_through_the_environment_not_the_command_line(tmp_path, monkeypatch):
    """A process list shows every argument to any user of the machine: a PostgreSQL URL's password was there."""
    import dse.search.workers as workers

    seen = {}

    class Popen:
        def __init__(self, cmd, env, **kw):
            seen.update(cmd=cmd, env=env)

    monkeypatch.setattr(workers.subprocess, "Popen", Popen)
    url = "postgresql://dse:s3cret@127.0.0.1:5432/dse"
    workers._spawn(load_study(_study(tmp_path, trials=2)), url, 0, 2, str(tmp_path)).errlog.close()
    assert not [a for a in seen["cmd"] if "s3cret" in a] and "--storage" not in seen["cmd"]
    assert seen["env"]["DSE_STORAGE"] == url


def test_a_trial_another_worker_failed_meanwhile_does_not_stop_this_worker():
    """A worker paused past its heartbeat (or cut off from the server) finds its trial failed and retried by
    another: Optuna refused to tell it ('Cannot tell a FAIL trial') and the worker died with an internal error."""
    from dse.search.study import optimize_one

    study = optuna.create_study()

    def objective(trial):
        study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)  # what fail_stale_trials does
        return 1.0

    optimize_one(study, objective)
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL]
    with pytest.raises((ValueError, AssertionError)):  # what the worker met (Optuna raises over its ValueError)
        study.optimize(objective, n_trials=1)
