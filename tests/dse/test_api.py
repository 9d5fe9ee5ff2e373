"""The public API (`import dse`) as a notebook uses it, its docstring example, and what a study stores for
optuna-dashboard."""

from __future__ import annotations

import doctest
import subprocess
import sys
import tomllib
from wsgiref.util import setup_testing_defaults

import pytest

import dse
from studyfiles import with_strategy


def test_a_notebook_runs_a_study_reads_its_front_and_exports_its_knee(study_file, tmp_path):
    spec = dse.load_study(study_file)
    res = dse.run(spec)
    assert res["finished"] == spec.trials and res["strategy"] == "joint"
    study = dse.open_study(study_file)  # a path works too
    df = study.front()
    assert len(df) == res["front"] > 0
    assert list(df.columns[:4]) == ["trial", "accuracy_drop", "speedup", "area_mm2"]
    assert (df["area_mm2"] <= 4.0).all()  # the constraint holds on the front
    assert df["accuracy_drop"].is_monotonic_increasing  # best first in the first objective
    knee = study.select(knee=True)[0]
    assert knee.number in set(df["trial"])
    import csv
    import io

    (row,) = csv.DictReader(io.StringIO(study.export(knee=True, format="csv")))
    assert row["first_seed"] == "0"  # the seeds the figures rest on (TOML and JSON had it, CSV did not)
    out = tmp_path / "knee.toml"
    out.write_text(study.export(knee=True))
    cfg = dse.load_configuration(out)
    again = dse.evaluate(cfg)["metrics"]
    assert {m: again[m] for m in knee.metrics} == tomllib.loads(out.read_text())["meta"]["metrics"] == knee.metrics
    # the study ran no surrogate control (its metrics need none): predictor_gain is evaluate's alone
    assert "predictor_gain" not in knee.metrics and set(again) - set(knee.metrics) == {"predictor_gain"}
    st = study.status()
    assert st["trials"]["complete"] + st["trials"]["fail"] == spec.trials
    assert st["front"] == res["front"] and st["strategy"] == "joint"


def test_the_api_checks_its_arguments_as_the_cli_checks_its_options(study_file, tmp_path):
    """A notebook's wrong argument is a UsageError naming it, never a silent default or a TypeError deep inside;
    a path stands for a study or a configuration file, one string for a list of one."""
    from dse.errors import UsageError

    spec = dse.load_study(study_file)
    for kw, name in ((dict(trials=2.5), "trials"), (dict(trials="5"), "trials"), (dict(trials=0), "trials"),
                     (dict(workers=0), "workers"), (dict(workers="2"), "workers"), (dict(timeout=-1), "timeout"),
                     (dict(timeout="1"), "timeout")):
        with pytest.raises(UsageError, match=rf"^{name}: must be "):
            dse.run(spec, **kw)
    with pytest.raises(UsageError, match=r"^spec: a StudySpec"):
        dse.run({"study": {}})
    assert dse.run(str(study_file), trials=3)["finished"] == 3  # a path, as open_study takes
    with dse.open_study(spec) as study:
        whole = study.front()
        assert len(study.front(limit=1)) == 1
        for bad in (0, -1, "2", 1.5):
            with pytest.raises(UsageError, match=r"^limit: must be an integer >= 1"):
                study.front(limit=bad)
        assert list(study.front(columns="speedup").columns) == ["trial", "speedup"]
        assert study.front(where=None).equals(whole)
        with pytest.raises(UsageError, match=r"^columns: a list of strings \(or one string\), got 5"):
            study.front(columns=5)
        cut = float(whole["speedup"].median())
        assert study.front(where=f"speedup>={cut}").equals(study.front(where=[f"speedup>={cut}"]))
        with pytest.raises(UsageError, match=r"^where: .*only with best="):
            study.select(where=["area_mm2<=2"])
        with pytest.raises(UsageError, match=r"^format: 'yaml'; choose one of toml, json, csv"):
            study.export(knee=True, format="yaml")
        knee = study.select(knee=True)[0]
        with pytest.raises(UsageError, match=r"^point: a Point"):
            dse.configuration(knee.config)
        out = tmp_path / "knee.toml"
        out.write_text(study.export(knee=True))
    assert dse.evaluate(str(out), metrics="speedup")["metrics"]["speedup"] == knee.metrics["speedup"]
    with pytest.raises(UsageError, match=r"^metrics: 'bogus' is not a metric; choose from .*speedup"):
        dse.evaluate(out, metrics=["bogus"])
    with pytest.raises(UsageError, match=r"^cfg: a Configuration"):
        dse.evaluate(knee.config)


def _hybrid(study_file):
    text = with_strategy(study_file.read_text(), "hybrid", front_size=3)
    study_file.write_text(text.replace("pred_width = [8, 32]", "pred_width = [4, 8, 16, 32, 64, 128]"))


def test_run_honours_the_strategy_of_the_file(study_file):
    _hybrid(study_file)
    spec = dse.load_study(study_file)
    res = dse.run(spec)
    assert res["strategy"] == "hybrid" and res["finished"] == spec.trials and res["surrogate_runs"] >= 1
    trials = dse.open_study(spec).optuna.get_trials()
    assert all("training_trial" in t.user_attrs for t in trials)  # entered by the hybrid, not sampled jointly


def test_the_docstring_example_runs(study_file):
    from dse import api

    spec = dse.load_study(study_file)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(api, "dse.api", globs={"spec": spec}):
        runner.run(test)
    res = runner.summarize(verbose=False)
    assert res.attempted >= 8 and res.failed == 0


def test_import_dse_stays_light():
    # the CLI checks a study file before Optuna is imported; the API names resolve without importing it
    code = ("import sys, dse; dse.run, dse.open_study, dse.evaluate, dse.Study; "
            "assert 'optuna' not in sys.modules and callable(dse.evaluate)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_optuna_dashboard_shows_the_metric_names_constraints_and_the_training_study(study_file):
    """Open a real (hybrid) study through optuna-dashboard's own app and read what its web UI shows."""
    pytest.importorskip("optuna_dashboard")
    import json

    import optuna
    from optuna_dashboard import wsgi

    _hybrid(study_file)
    spec = dse.load_study(study_file)
    dse.run(spec, trials=6)
    storage = optuna.storages.RDBStorage(f"sqlite:///{study_file.parent / 'tiny.db'}")
    app = wsgi(storage)

    def get(path):
        out = {}

        def start(status, headers, exc_info=None):
            out["status"] = status

        environ = {"PATH_INFO": path}
        setup_testing_defaults(environ)
        body = b"".join(app(environ, start))
        assert out["status"].startswith("200"), (path, out["status"])
        return json.loads(body)

    studies = {s["study_name"]: s for s in get("/api/studies")["study_summaries"]}
    assert set(studies) == {"tiny", "tiny.training"}
    main = get(f"/api/studies/{studies['tiny']['study_id']}")
    assert main["objective_names"] == ["accuracy_drop", "speedup", "area_mm2"]
    for t in main["trials"]:  # feasibility, shown per trial: the area budget's violation
        area = json.loads({a["key"]: a["value"] for a in t["user_attrs"]}["metrics"])["area_mm2"]
        assert t["constraints"] == [pytest.approx(area - 4.0)]
    attrs = {a["key"]: a["value"] for a in main["user_attrs"]}
    assert "area_mm2 <= 4" in attrs["description"]
    outer = get(f"/api/studies/{studies['tiny.training']['study_id']}")
    assert outer["objective_names"] == ["best accuracy_drop", "best speedup", "best area_mm2"]
    attrs = {a["key"]: a["value"] for a in outer["user_attrs"]}
    assert "internal to the dse study 'tiny'" in attrs["description"]


def test_run_refuses_what_it_would_ignore_and_keeps_the_overrides_of_the_command(study_file):
    """With workers > 1, dse.run dropped its extra keyword arguments (a typo, progress=, strategy=) and a spec
    changed in code was replaced by the file's in the worker processes, silently."""
    from dse.errors import UsageError

    spec = dse.load_study(study_file)
    with pytest.raises(UsageError, match=r"^trails: not an argument of dse.run; allowed: .*trials"):
        dse.run(spec, trails=5, workers=2)
    with pytest.raises(UsageError, match=r"^trails: not an argument"):
        dse.run(spec, trails=5)
    with pytest.raises(UsageError, match=r"^progress: works in one process only"):
        dse.run(spec, workers=2, progress=print)
    with pytest.raises(UsageError, match=r"^stop: works in one process only"):
        dse.run(spec, workers=2, stop=lambda s: False)
    with pytest.raises(UsageError, match=r"^progress: a function"):
        dse.run(spec, progress=3)
    with pytest.raises(UsageError, match=r"^spec: differs from its file .* in seeds, seeds_max; worker processes read"):
        dse.run(spec.with_overrides(seeds=2), workers=2)
    with pytest.raises(UsageError, match=r"^runs: must be an integer >= 1"):
        dse.run(spec, runs=0)
    res = dse.run(spec, trials=2, seed=7, strategy="joint")  # the command's --seed and --strategy
    assert res["finished"] == 2 and res["strategy"] == "joint"


def test_a_notebook_keeps_its_optuna_log_level_and_gets_usage_errors_for_wrong_types(study_file, tmp_path):
    import pathlib

    import optuna

    from dse.errors import UsageError

    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.INFO)
    try:
        dse.run(study_file, trials=2)
        with dse.open_study(study_file, storage=pathlib.Path(str(study_file.with_suffix(".db")))) as study:
            assert len(study.front()) >= 1  # a Path is a storage path, as a string is
            empty = study.front(where="speedup>=1e9", columns=["speedup", "area_mm2"])
            assert empty.empty and list(empty.columns) == ["trial", "speedup", "area_mm2"]
            assert list(study.front(where="speedup>=1e9").columns[:3]) == ["trial", "accuracy_drop", "speedup"]
            with pytest.raises(UsageError, match=r"^where: a list of strings"):
                study.front(where=[3])
        assert optuna.logging.get_verbosity() == optuna.logging.INFO  # dse set ERROR while it ran, then put it back
    finally:
        optuna.logging.set_verbosity(before)
    for call in (lambda: dse.load_study(None), lambda: dse.load_configuration(3)):
        with pytest.raises(UsageError, match=r"^path: a file path"):
            call()
    with pytest.raises(UsageError, match=r"^spec: a StudySpec"):
        dse.open_study(None)
    assert {"run", "open_study", "load_study", "Study"} <= set(dir(dse))  # tab completion
    cfg = tmp_path / "c.toml"
    with dse.open_study(study_file) as study:
        cfg.write_text(study.export(knee=True))
    for bad in (3, (0, 0), (0.5,), "12", [-1], ()):
        with pytest.raises(UsageError, match=r"^seeds: distinct integers"):
            dse.evaluate(cfg, seeds=bad)
    with pytest.raises(UsageError, match=r"^metrics: a list of metric names"):
        dse.evaluate(cfg, metrics=3)


def test_run_with_workers_from_a_background_thread(study_file, tmp_path, monkeypatch):
    """signal handlers can only be set in the main thread: the run failed there and left its log folder."""
    import tempfile
    import threading

    temp = tmp_path / "temp"  # this run's temporary folders only (other tests' workers use the system's)
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    out = {}
    t = threading.Thread(target=lambda: out.update(res=dse.run(study_file, trials=3, workers=2)))
    t.start()
    t.join(timeout=300)
    assert not t.is_alive() and out["res"]["finished"] == 3
    assert list(temp.iterdir()) == []


def test_optuna_quiet_periods_that_overlap_restore_the_level_once_the_last_ends():
    """Two dse calls overlapping in threads: the inner one saved ERROR as the level to restore."""
    import optuna

    from dse.search.study import optuna_quiet

    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.INFO)
    try:
        a, b = optuna_quiet(), optuna_quiet()
        a.__enter__()
        b.__enter__()
        a.__exit__(None, None, None)  # the first to start ends first (another thread's run)
        assert optuna.logging.get_verbosity() == optuna.logging.ERROR  # b still works: quiet
        b.__exit__(None, None, None)
        assert optuna.logging.get_verbosity() == optuna.logging.INFO
    finally:
        optuna.logging.set_verbosity(before)


def test_errors_from_python_calls_name_the_python_arguments(study_file, tmp_path):
    """The command's option names (--strategy, --knob, TRIAL) leaked into the API's errors."""
    dse.run(study_file, trials=2)
    with pytest.raises(dse.UsageError, match=r"^strategy: 'bogus'"):
        dse.run(study_file, strategy="bogus")
    with pytest.raises(dse.UsageError, match=r"^sampler: 'bogus' is not a sampler"):
        dse.run(study_file, sampler="bogus")
    with pytest.raises(dse.UsageError, match=r"^specs: a list of two or more"):
        dse.compare([study_file])
    with dse.open_study(study_file) as study:
        with pytest.raises(dse.UsageError, match=r"^trial: the study has no trial 999"):
            study.show(999)
        cfg = tmp_path / "knee.toml"
        cfg.write_text(study.export(knee=True))
    with pytest.raises(dse.UsageError, match=r"^knobs: give one or two knobs"):
        dse.sweep(cfg, {})
    with pytest.raises(dse.UsageError, match=r"^knobs: 'bogus' is not a section"):
        dse.sweep(cfg, {"bogus.rows": [8]})


def test_every_command_has_its_python_call(study_file, tmp_path, cli):
    """compare, sweep, show, plot and report were reachable from Python only through internals; each call gives
    what its command prints."""
    import json

    other = tmp_path / "other.toml"
    other.write_text(study_file.read_text().replace('name = "tiny"', 'name = "other"').replace("seed = 3", "seed = 11"))
    dse.run(study_file, trials=4)
    dse.run(other, trials=4)
    res = dse.compare([study_file, dse.load_study(other)])
    assert res["objectives"] == ["accuracy_drop", "speedup", "area_mm2"]
    assert [r["study"] for r in res["studies"]] == ["tiny", "other"]
    printed = json.loads(cli("compare", study_file, other, "--format", "json").stdout)
    assert printed["studies"] == res["studies"] and printed["reference"] == res["reference"]
    with pytest.raises(dse.UsageError, match=r"^objectives: a front needs two or more metrics"):
        dse.compare([study_file, other], objectives="speedup")
    with pytest.raises(dse.UsageError, match=r"^specs: a list of two or more"):
        dse.compare(study_file)
    with dse.open_study(study_file) as study:
        n = int(study.front()["trial"].iloc[0])
        d = study.show(n)
        assert d == json.loads(cli("show", study_file, n, "--format", "json").stdout)
        with pytest.raises(dse.UsageError, match=r"^trial: must be an integer >= 0"):
            study.show(-1)
        files = study.plot(tmp_path / "figs", warn=lambda m: None)
        assert files and all(f.parent == tmp_path / "figs" and f.exists() for f in files)
        page = study.report(tmp_path / "r.html")
        assert page == tmp_path / "r.html" and "<html" in page.read_text()[:500].lower()
        cfg = tmp_path / "knee.toml"
        cfg.write_text(study.export(knee=True))
    df = dse.sweep(cfg, {"hardware.rows": [8, 16]})
    assert list(df["hardware.rows"]) == [8, 16]
    rows = json.loads(cli("sweep", cfg, "--knob", "hardware.rows=8,16", "--format", "json", "-q").stdout)
    assert df.to_dict("records") == rows
    assert dse.sweep(cfg, "hardware.rows=8").equals(df.iloc[:1])
