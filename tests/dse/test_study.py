"""Studies end to end on a tiny, fast study: resume, determinism, constraints, export round trip."""

from __future__ import annotations

import json
import tomllib

import optuna
import pytest

from dse.cli import main
from dse.config.configuration import load_configuration
from dse.evaluation import metrics as registry
from dse.evaluation.evaluator import evaluate
from dse.search.pareto import front
from dse.search.runner import run_study as run
from dse.search.study import load_points, open_study
from dse.search.studyfile import load_study


def _cli(*args, capsys=None):
    with pytest.raises(SystemExit) as e:
        main(list(args))
    return e.value.code


def test_run_reaches_the_budget_and_records_every_metric(study_file):
    spec = load_study(study_file)
    res = run(spec)
    assert res["finished"] == spec.trials and not res["interrupted"]
    study = open_study(spec, create=False)
    trials = study.get_trials()
    assert len(trials) == spec.trials
    assert (study_file.parent / "tiny.db").exists()  # SQLite beside the study file
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert done
    for t in done:
        m = t.user_attrs["metrics"]
        # every metric, except those of surrogate controls the study's objectives and constraints do not need
        assert set(m) == set(registry.names()) - {"predictor_gain"} | {"seeds"}  # one seed: no standard error
        assert m["seeds"] == 1 and t.user_attrs["per_seed"]["seeds"] == [0]
        assert t.user_attrs["models"][0]["model"] == "resnet18"
        assert "accuracy_bp" in t.user_attrs["surrogate"]
        # one constraint, in the list format optuna-dashboard reads (Optuna names it "0")
        assert t.system_attrs["constraints"] == [m["area_mm2"] - 4.0]
        assert t.constraints == {"0": m["area_mm2"] - 4.0}
        assert t.values == [m["accuracy_drop"], m["speedup"], m["area_mm2"]]


def test_resume_adds_exactly_the_missing_trials(study_file):
    spec = load_study(study_file)
    run(spec, trials=5)
    study = open_study(spec, create=False)
    assert len(study.get_trials()) == 5
    first = {t.number: t.params for t in study.get_trials()}
    run(spec)  # to the file's budget, 12
    trials = open_study(spec, create=False).get_trials()
    assert len(trials) == 12
    assert sorted(t.number for t in trials) == list(range(12))
    assert {t.number: t.params for t in trials if t.number < 5} == first
    run(spec)  # nothing left to do
    assert len(open_study(spec, create=False).get_trials()) == 12


def test_same_file_and_seed_give_the_same_front(study_file, tmp_path):
    other = tmp_path / "copy"
    other.mkdir()
    copy = other / "tiny.toml"
    copy.write_text(study_file.read_text())
    fronts = []
    for f in (study_file, copy):
        spec = load_study(f)
        run(spec)
        pts = load_points(open_study(spec, create=False), spec)
        fronts.append(sorted((p.number, p.values, tuple(sorted(p.params.items()))) for p in
                             front(pts, spec.directions)))
    assert fronts[0] == fronts[1] and fronts[0]


def test_infeasible_trials_never_reach_pareto_or_export(study_file, capsys):
    spec = load_study(study_file)
    run(spec)
    pts = load_points(open_study(spec, create=False), spec)
    infeasible = {p.number for p in pts if not p.feasible}
    assert infeasible, "the area budget should rule some configurations out"
    assert _cli("pareto", str(study_file), "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and not infeasible & {r["trial"] for r in rows}
    assert all(r["area_mm2"] <= 4.0 for r in rows)
    assert _cli("export", str(study_file), "--pareto", "--format", "json") == 0
    docs = json.loads(capsys.readouterr().out)
    docs = docs if isinstance(docs, list) else [docs]
    assert not infeasible & {d["meta"]["trial"] for d in docs}
    # --best with a condition picks among feasible trials only
    assert _cli("export", str(study_file), "--best", "speedup", "--where", "accuracy_drop<=100",
                "--format", "json") == 0
    d = json.loads(capsys.readouterr().out)
    assert d["meta"]["trial"] not in infeasible
    best = max((p for p in pts if p.feasible), key=lambda p: (p.metrics["speedup"], -p.number))
    assert d["meta"]["trial"] == best.number


def test_export_evaluate_round_trip(study_file, tmp_path, capsys):
    spec = load_study(study_file)
    run(spec)
    out = tmp_path / "knee.toml"
    assert _cli("export", str(study_file), "--knee", "--out", str(out)) == 0
    capsys.readouterr()
    doc = tomllib.loads(out.read_text())
    cfg = load_configuration(out)
    again = evaluate(cfg)["metrics"]
    stored = doc["meta"]["metrics"]
    assert {m: again[m] for m in stored} == stored  # every metric the study recorded, to the last digit
    # and through the command line, in JSON
    assert _cli("evaluate", str(out), "--json") == 0
    printed = json.loads(capsys.readouterr().out)["metrics"]
    assert {m: printed[m] for m in stored} == stored


def test_status_and_plots(study_file, tmp_path, capsys):
    spec = load_study(study_file)
    run(spec)
    assert _cli("status", str(study_file), "--json") == 0
    st = json.loads(capsys.readouterr().out)
    assert st["trials"]["complete"] + st["trials"]["fail"] == 12 and st["front"] >= 1
    outdir = tmp_path / "plots"
    assert _cli("plot", str(study_file), "--out", str(outdir)) == 0
    names = {p.name for p in outdir.iterdir()}
    assert {"objectives.png", "objectives.svg", "hypervolume.png", "hypervolume.svg"} <= names
    assert (outdir / "objectives.png").stat().st_size > 10_000


def test_status_shows_the_budget_of_the_last_run(study_file, cli):
    """`dse run --trials N` overrides the file's budget; `dse status` shows the budget the last run aimed at
    (and what the file says), so a study run to 5 of the file's 12 trials does not look unfinished."""
    r = cli("run", study_file, "--trials", "5", "--quiet")
    assert r.returncode == 0, r.stderr
    st = json.loads(cli("status", study_file, "--json").stdout)
    assert st["budget"] == 5 and st["budget_from"] == "the last run: trials 5 (the file: 12)"
    out = cli("status", study_file).stdout
    assert "budget_from  the last run: trials 5 (the file: 12)" in out
    assert cli("run", study_file, "--quiet").returncode == 0  # the file's budget again
    st = json.loads(cli("status", study_file, "--json").stdout)
    assert st["budget"] == 12 and "budget_from" not in st
    assert st["trials"]["complete"] + st["trials"]["fail"] == 12


def test_status_says_when_trials_were_trained_on_different_blas_kernels(study_file, cli):
    """A run's accuracies reproduce on its BLAS kernel only; workers on two CPUs (or a cache copied from another
    machine) mix kernels in one front: status says so, and says nothing while there is one kernel."""
    from optuna.trial import TrialState, create_trial

    from dse.search.study import open_study

    spec = load_study(study_file)
    assert cli("run", study_file, "--trials", "3", "--quiet").returncode == 0
    assert "blas" not in json.loads(cli("status", study_file, "--json").stdout)
    study = open_study(spec, create=False)
    t = study.get_trials(states=(TrialState.COMPLETE,))[0]
    assert t.user_attrs["surrogate"]["blas"]  # recorded by the run
    other = {**t.user_attrs, "surrogate": {**t.user_attrs["surrogate"], "blas": "openblas 0.3.0 Other"}}
    study.add_trial(create_trial(params=t.params, distributions=t.distributions, values=t.values,
                                 user_attrs=other))
    line = json.loads(cli("status", study_file, "--json").stdout)["blas"]
    assert "2 BLAS kernels" in line and "openblas 0.3.0 Other: 1 trials" in line
    assert "blas" in cli("status", study_file).stdout


def test_a_worker_on_a_study_past_its_budget_says_so(study_file, cli):
    """It printed '3/2 done'."""
    assert cli("run", study_file, "--trials", "3", "--quiet").returncode == 0
    r = cli("worker", study_file, "--trials", "2", "--quiet")
    assert r.returncode == 0 and "tiny 3 done, the budget of 2 reached already" in r.stdout, r.stdout


def test_status_names_why_a_trial_optunas_heartbeat_failed(study_file, cli):
    """Optuna fails the trial of a worker whose heartbeat went stale (another machine) and retries it, with no
    reason of its own: status, report said 'no reason recorded'."""
    from optuna.trial import TrialState, create_trial

    from dse.search.study import open_study

    assert cli("run", study_file, "--trials", "2", "--quiet").returncode == 0
    study = open_study(load_study(study_file), create=False)
    t = study.get_trials(states=(TrialState.COMPLETE,))[0]
    study.add_trial(create_trial(state=TrialState.FAIL, params=t.params, distributions=t.distributions))
    number = len(study.get_trials()) - 1
    # its retry went stale too: Optuna keeps failed_trial at the first and lists the chain in retry_history
    study.add_trial(create_trial(state=TrialState.FAIL, params=t.params, distributions=t.distributions,
                                 system_attrs={"failed_trial": number, "retry_history": [number]}))
    study.add_trial(create_trial(params=t.params, distributions=t.distributions, values=t.values,
                                 system_attrs={"failed_trial": number, "retry_history": [number, number + 1]}))
    failures = json.loads(cli("status", study_file, "--json").stdout)["failures"]
    assert failures == {"interrupted: its worker's heartbeat went stale (it died, was paused or lost the "
                        "server); retried": 2}


def test_an_impossible_combination_fails_with_its_reason_and_the_study_goes_on(study_file, capsys):
    # every value is possible alone; 512 rows need more than a 0.5 KiB ifmap buffer holds
    text = study_file.read_text().replace("rows = [8, 16, 32]", "rows = [8, 512]\nifmap_kb = [0.5, 4.0]")
    study_file.write_text(text)
    spec = load_study(study_file)
    res = run(spec)
    assert res["finished"] == spec.trials
    trials = open_study(spec, create=False).get_trials()
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    assert failed and res["failed"] == len(failed)
    assert all(t.params["hardware.rows"] == 512 and t.params["hardware.ifmap_kb"] == 0.5 for t in failed)
    assert all(t.user_attrs["fail_reason"].startswith("impossible configuration: ifmap_kb") for t in failed)
    assert any(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert _cli("status", str(study_file)) == 0
    out = capsys.readouterr().out
    assert f"{len(failed)} x impossible configuration: ifmap_kb" in out


def _open_storage(url):
    from dse.search.study import open_storage

    open_storage(url)
    return "ok"


def test_processes_creating_one_fresh_database_at_once_all_succeed(tmp_path):
    """`dse run` and `dse status` (or several workers) starting together on a new SQLite file."""
    import multiprocessing as mp

    for i in range(3):
        url = f"sqlite:///{tmp_path / f'race{i}.db'}"
        with mp.get_context("spawn").Pool(4) as pool:
            assert pool.map(_open_storage, [url] * 4) == ["ok"] * 4


def _run_cli(capsys, *args):
    code = _cli(*args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_changed_file_is_refused_with_what_changed_and_nothing_is_lost(study_file, capsys):
    spec = load_study(study_file)
    run(spec, trials=4)
    before = [(t.number, t.state, t.values) for t in open_study(spec, create=False).get_trials()]
    original = study_file.read_text()
    cases = [
        (original.replace("rows = [8, 16, 32]", "rows = [8, 16]"),
         "space.hardware.rows: [8, 16, 32] -> [8, 16]"),
        (original.replace("max = 4.0", "max = 2.0"), 'constraints.0: "area_mm2 <= 4" -> "area_mm2 <= 2"'),
        (original.replace("epochs = 2\n\n[training]", "epochs = 3\n\n[training]"),
         "base.workload.epochs: 2 -> 3"),
    ]
    for text, change in cases:
        study_file.write_text(text)
        for args in (("run", str(study_file)), ("pareto", str(study_file)), ("export", str(study_file))):
            code, out, err = _run_cli(capsys, *args)
            assert code == 2, (args, err)
            assert err.count("\n") == 1 and "was made from a different study file" in err, err
            assert change in err and "dse run --accept-changes" in err and "[study] name" in err, err
    study_file.write_text(original)
    # --strategy overrides count too: joint trials are not appended to a hybrid study (and vice versa)
    code, out, err = _run_cli(capsys, "run", str(study_file), "--strategy", "hybrid", "--quiet")
    assert code == 2 and "holds trials of strategy 'joint', not 'hybrid'" in err and "--accept-changes" not in err
    assert [(t.number, t.state, t.values) for t in open_study(spec, create=False).get_trials()] == before


def test_accept_changes_continues_and_the_study_follows_the_new_constraints(study_file, capsys):
    spec = load_study(study_file)
    run(spec, trials=6)
    study_file.write_text(study_file.read_text().replace("max = 4.0", "max = 2.5"))
    code, out, err = _run_cli(capsys, "run", str(study_file), "--accept-changes", "--quiet")
    assert code == 0, err
    spec = load_study(study_file)
    pts = load_points(open_study(spec, create=False), spec)
    assert len(open_study(spec, create=False).get_trials()) == spec.trials
    # feasibility is the study's (now the new file's) constraint, for old and new trials alike
    assert all(p.feasible == (p.metrics["area_mm2"] <= 2.5) for p in pts)
    assert _cli("pareto", str(study_file), "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(r["area_mm2"] <= 2.5 for r in rows)
    # dse show judges a trial by the study's constraints too (it showed the stored verdict, unlabelled), and its
    # table names each metric's constraint and whether the trial meets it
    for p in pts:
        assert _cli("show", str(study_file), str(p.number), "--format", "json") == 0
        d = json.loads(capsys.readouterr().out)
        assert d["constraints"] == {"area_mm2 <= 2.5": pytest.approx(p.metrics["area_mm2"] - 2.5)}
        assert d["feasible"] == p.feasible
        assert _cli("show", str(study_file), str(p.number)) == 0
        line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("area_mm2 "))
        assert f"constraint <= 2.5: {'met' if p.feasible else 'violated'}" in line, line
    assert {p.feasible for p in pts} == {True, False}


def test_trials_that_did_not_record_a_new_objective_or_constraint_are_named_not_misjudged(study_file, capsys):
    """After --accept-changes swapped an objective for one no trial recorded, status said "no complete trial
    yet" and pareto blamed the constraints; with a constraint on such a metric, dse show called a violated
    constraint met."""
    spec = load_study(study_file)
    run(spec, trials=4)
    text = study_file.read_text().replace('metric = "speedup"', 'metric = "predictor_gain"')
    text += '\n[[constraints]]\nmetric = "predictor_gain"\nmin = 0\n'
    study_file.write_text(text.replace("max = 4.0", "max = 1.0"))
    spec = load_study(study_file)
    open_study(spec, create=True, accept_changes=True)  # what dse run --accept-changes records first
    assert _cli("status", str(study_file), "--json") == 0
    st = json.loads(capsys.readouterr().out)
    assert st["unplaced"] == 4 and "none of the 4 complete trials recorded all the study's objectives" in \
        st["last_10pct"]
    assert _cli("pareto", str(study_file)) == 0
    assert "(none: none of the 4 complete trials recorded all the study's objectives" in capsys.readouterr().out
    assert _cli("show", str(study_file), "0", "--format", "json") == 0
    d = json.loads(capsys.readouterr().out)
    assert d["constraints"]["predictor_gain >= 0"] is None and d["constraints"]["area_mm2 <= 1"] > 0
    assert _cli("show", str(study_file), "0") == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("area_mm2 "))
    assert "constraint <= 1: violated" in line, line
    # the figures say so too (found by probing: they drew the trials that did and titled them "complete trials")
    import matplotlib.pyplot as plt

    from dse.figures.plots import study_figures

    run(spec, trials=6)
    said: list[str] = []
    figs = dict(study_figures(open_study(spec, create=False), spec, said.append))
    try:
        assert any(m.startswith("figures: 4 of the 6 complete trials recorded no value of an objective") for m in said)
        assert figs["objectives"]._suptitle.get_text().startswith("tiny: 2 of 6 complete trials")
    finally:
        for f in figs.values():
            plt.close(f)


def test_show_names_both_bounds_of_a_two_sided_constraint(study_file, capsys):
    """The role dropped the metric's name by string replacement: 'constraint >= 0.1 and area_mm2 <= 4'."""
    study_file.write_text(study_file.read_text().replace("max = 4.0", "min = 0.1\nmax = 4.0"))
    run(load_study(study_file), trials=1)
    assert _cli("show", str(study_file), "0") == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("area_mm2 "))
    assert "constraint >= 0.1 and <= 4: " in line, line


def test_accept_changes_cannot_change_a_list_of_choices(study_file, capsys):
    spec = load_study(study_file)
    run(spec, trials=2)
    study_file.write_text(study_file.read_text().replace("rows = [8, 16, 32]", "rows = [8, 16]"))
    code, out, err = _run_cli(capsys, "run", str(study_file), "--accept-changes", "--quiet")
    assert code == 2 and "space.hardware.rows cannot change within a study" in err, err
    assert len(open_study(spec, create=False).get_trials()) == 2


@pytest.mark.parametrize("now, what", [("rows = { low = 8, high = 32, step = 8 }", "the kind"),
                                       ("rows = { low = 8, high = 32 }", "the kind")])
def test_accept_changes_cannot_make_a_list_of_choices_a_range(study_file, capsys, now, what):
    """Accepted, and then every new trial failed ("Cannot set different distribution kind to the same
    parameter name"), spending the budget."""
    spec = load_study(study_file)
    run(spec, trials=2)
    study_file.write_text(study_file.read_text().replace("rows = [8, 16, 32]", now))
    code, out, err = _run_cli(capsys, "run", str(study_file), "--accept-changes", "--quiet")
    assert code == 2 and f"{what} (a list of choices or a range) of space.hardware.rows cannot change" in err, err
    assert len(open_study(spec, create=False).get_trials()) == 2


def test_a_kind_changed_over_two_accepted_edits_is_refused(study_file, capsys):
    """A list made a fixed value (accepted), then another list (accepted): the last identity held no list to
    compare with, and every new trial failed against the distribution the first trials stored."""
    spec = load_study(study_file)
    run(spec, trials=2)
    text = study_file.read_text()
    study_file.write_text(text.replace("rows = [8, 16, 32]", "rows = 16"))
    assert _run_cli(capsys, "run", str(study_file), "--accept-changes", "--quiet", "--trials", "3")[0] == 0
    study_file.write_text(text.replace("rows = [8, 16, 32]", "rows = [8, 64]"))
    code, out, err = _run_cli(capsys, "run", str(study_file), "--accept-changes", "--quiet", "--trials", "5")
    assert code == 2 and "space.hardware.rows cannot take its new values in this study" in err, err
    stored = optuna.load_study(study_name=spec.name, storage=f"sqlite:///{study_file.parent / 'tiny.db'}")
    assert len(stored.get_trials()) == 3 and all(t.state.name == "COMPLETE" for t in stored.get_trials())


def test_a_study_stored_with_a_choice_twice_opens_read_only_with_the_file_corrected(study_file, capsys):
    """Files may no longer list a choice twice: a study made from one that did must stay readable."""
    spec = load_study(study_file)
    run(spec, trials=2)
    study = open_study(spec, create=False)
    stored = dict(study.user_attrs["dse_study_file"])
    stored["space"] = {**stored["space"], "hardware.rows": [8, 16, 32, 32]}
    study.set_user_attr("dse_study_file", stored)
    assert _run_cli(capsys, "pareto", str(study_file))[0] == 0
    assert _run_cli(capsys, "status", str(study_file))[0] == 0


def test_fixed_by_optuna_names_each_change_optuna_refuses():
    from dse.search.study import _fixed_by_optuna

    assert _fixed_by_optuna([8, 16], [8, 16]) is None and _fixed_by_optuna([8, 16], [8]) == "the choices"
    assert _fixed_by_optuna({"low": 8, "high": 32}, {"low": 4, "high": 64}) is None  # a range may move
    assert _fixed_by_optuna({"low": 8, "high": 32}, {"low": 8, "high": 32, "log": True}).startswith("the scale")
    assert _fixed_by_optuna({"low": 8, "high": 32}, {"low": 8.0, "high": 32.0}).startswith("the number type")
    assert _fixed_by_optuna({"low": 8, "high": 32}, [8, 32]).startswith("the kind")
    assert _fixed_by_optuna(16, [8, 16]) is None and _fixed_by_optuna([8, 16], 16) is None


def test_accept_changes_to_an_objective_of_the_same_direction_ranks_by_the_new_one(study_file, capsys):
    """The front was computed from each trial's stored Optuna values, still the old objective's: after
    speedup -> speedup_same_hw, points the new objective dominates were listed on the front."""
    spec = load_study(study_file)
    run(spec, trials=6)
    study_file.write_text(study_file.read_text().replace('metric = "speedup"', 'metric = "speedup_same_hw"'))
    code, out, err = _run_cli(capsys, "run", str(study_file), "--accept-changes", "--quiet", "--trials", "8")
    assert code == 0, err
    spec = load_study(study_file)
    assert "speedup_same_hw" in spec.metrics and "speedup" not in spec.metrics
    pts = load_points(open_study(spec, create=False), spec)
    assert len(pts) == 8 and all(p.values == tuple(p.metrics[m] for m in spec.metrics) for p in pts)
    # the front, judged independently from every trial's recorded figures
    feasible = [p for p in pts if p.feasible]
    signs = [1 if d == "minimize" else -1 for d in spec.directions]

    def dominates(a, b):
        x = [s * a.metrics[m] for s, m in zip(signs, spec.metrics)]
        y = [s * b.metrics[m] for s, m in zip(signs, spec.metrics)]
        return all(u <= v for u, v in zip(x, y)) and x != y
    expected = {tuple(p.metrics[m] for m in spec.metrics) for p in feasible
                if not any(dominates(q, p) for q in feasible)}
    assert _cli("pareto", str(study_file), "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)  # one row per objective vector (duplicates: the first trial)
    assert {tuple(r[m] for m in spec.metrics) for r in rows} == expected and len(rows) == len(expected)


def test_a_study_notices_an_edited_technology_table_and_a_missing_one(study_file, capsys):
    """A study stored only the path of the technology table it names: editing the table after a run mixed two
    energy models in one front without a word; a missing table failed every trial, spending the budget."""
    import shutil
    from importlib import resources

    tech = study_file.parent / "tech.toml"
    text = study_file.read_text()
    study_file.write_text('technology = "tech.toml"\n' + text)
    code, out, err = _run_cli(capsys, "run", str(study_file), "--quiet", "--trials", "2")
    assert code == 2 and "technology: " in err and "tech.toml" in err and "No such file" in err, err
    assert not (study_file.parent / "tiny.db").exists() or not optuna.get_all_study_summaries(
        f"sqlite:///{study_file.parent / 'tiny.db'}")  # refused before any trial
    shutil.copy(resources.files("accel").joinpath("data/tech_default.toml"), tech)
    assert _run_cli(capsys, "run", str(study_file), "--quiet", "--trials", "2")[0] == 0
    # a comment, a citation or line endings change no number: the study opens as it is
    tech.write_bytes(("# a note\n" + tech.read_text().replace('source = "', 'source = "see also: ')).replace(
        "\n", "\r\n").encode())
    assert _run_cli(capsys, "status", str(study_file))[0] == 0
    tech.write_text(tech.read_text().replace("[dram_pj_per_byte]\nvalue = ", "[dram_pj_per_byte]\nvalue = 1"))
    code, out, err = _run_cli(capsys, "run", str(study_file), "--quiet", "--trials", "4")
    assert code == 2 and "what dse reads from tech.toml changed (digest " in err and "--accept-changes" in err, err
    assert _run_cli(capsys, "run", str(study_file), "--quiet", "--trials", "4", "--accept-changes")[0] == 0
    # a study made before studies recorded file contents opens as it is, and records them
    spec = load_study(study_file)
    study = open_study(spec, create=False)
    stored = dict(study.user_attrs["dse_study_file"])
    del stored["file contents"]
    study.set_user_attr("dse_study_file", stored)
    assert _run_cli(capsys, "run", str(study_file), "--quiet", "--trials", "5")[0] == 0
    assert "file contents" in open_study(spec, create=False).user_attrs["dse_study_file"]


def test_a_study_moved_or_copied_with_its_technology_table_opens_and_resumes(study_file, capsys):
    """Found by probing: a study naming a technology table beside it stored the table's absolute path, so a copy
    of the folder (or the folder moved) was refused by every command as made from a different file, and the
    only way on, --accept-changes, wrote to the study. Paths are recorded relative to the study file; a study
    that recorded absolute ones still opens where it was made."""
    import shutil
    from importlib import resources

    shutil.copy(resources.files("accel").joinpath("data/tech_default.toml"), study_file.parent / "tech.toml")
    study_file.write_text('technology = "tech.toml"\n' + study_file.read_text())
    assert _run_cli(capsys, "run", str(study_file), "--quiet", "--trials", "2")[0] == 0
    stored = open_study(load_study(study_file), create=False).user_attrs["dse_study_file"]
    assert stored["base"]["technology"] == "tech.toml" and list(stored["file contents"]) == ["tech.toml"]
    moved = study_file.parent.parent / "moved"
    shutil.copytree(study_file.parent, moved)
    shutil.rmtree(study_file.parent)  # moved, not copied: the old absolute path no longer exists
    for args in (("status",), ("pareto",), ("show", "0")):
        code, out, err = _run_cli(capsys, args[0], str(moved / study_file.name), *args[1:])
        assert code == 0 and "dse:" not in err, (args, err)
    assert _run_cli(capsys, "run", str(moved / study_file.name), "--quiet", "--trials", "3")[0] == 0
    # a study that recorded the absolute path (before) opens in place; moved, it is refused as before
    spec = load_study(moved / study_file.name)
    study = open_study(spec, create=False)
    old = json.loads(json.dumps(study.user_attrs["dse_study_file"]))
    absolute = str((moved / "tech.toml").resolve())
    old["base"]["technology"], old["file contents"] = absolute, {absolute: old["file contents"]["tech.toml"]}
    study.set_user_attr("dse_study_file", old)
    assert _run_cli(capsys, "status", str(moved / study_file.name))[0] == 0


def test_after_an_accepted_change_of_table_earlier_trials_keep_theirs_and_shared_tables_stay_absolute(
        study_file, capsys, tmp_path):
    """Found by review: reading each stored trial with the file the study file names now made the trials before
    an accepted change of table look recomputed by another model (a warning on every read) and exported them
    with the new table (dse evaluate of the export gave other figures); a table named by an absolute path was
    recorded relative to the study file, so a copy of the study file elsewhere was refused."""
    import shutil
    from importlib import resources

    base = resources.files("accel").joinpath("data/tech_default.toml").read_text()
    (study_file.parent / "tech.toml").write_text(base)
    (study_file.parent / "tech2.toml").write_text(base.replace("value = 160.0", "value = 1000.0", 1))
    text = study_file.read_text()
    study_file.write_text('technology = "tech.toml"\n' + text)
    assert _run_cli(capsys, "run", str(study_file), "--quiet", "--trials", "2")[0] == 0
    study_file.write_text('technology = "tech2.toml"\n' + text)
    assert _run_cli(capsys, "run", str(study_file), "--quiet", "--trials", "3", "--accept-changes")[0] == 0
    code, out, err = _run_cli(capsys, "show", str(study_file), "0", "--format", "json")
    assert code == 0 and "dse:" not in err, err
    shown = json.loads(out)
    assert shown["config"]["technology"].endswith("tech.toml") and shown["metrics"]["energy_j"] > 0
    stored = open_study(load_study(study_file), create=False).trials[0].user_attrs["metrics"]["energy_j"]
    assert shown["metrics"]["energy_j"] == stored
    # a shared table by its absolute path: the study file copied elsewhere (with its database) still opens
    shared = tmp_path / "shared" / "t.toml"
    shared.parent.mkdir()
    shared.write_text(base)
    other = tmp_path / "a" / "b"
    other.mkdir(parents=True)
    study = other / "abs.toml"
    study.write_text(f'technology = "{shared}"\n' + text.replace('name = "tiny"', 'name = "abs"'))
    assert _run_cli(capsys, "run", str(study), "--quiet", "--trials", "2")[0] == 0
    deeper = other / "c"
    deeper.mkdir()
    for f in other.glob("abs.*"):
        shutil.copy(f, deeper / f.name)
    code, out, err = _run_cli(capsys, "status", str(deeper / "abs.toml"))
    assert code == 0 and "dse:" not in err, err


def test_a_copied_study_reads_its_own_files_and_a_symlinked_table_moves_with_it(study_file, capsys, tmp_path):
    """Found by review: a copy of a study folder read its trials with the original's table (edited there since:
    the copy warned of another model and refused to run), and a table named through a symlink was recorded by
    its target's path, so a copy at another depth was refused."""
    import shutil
    from importlib import resources

    base = resources.files("accel").joinpath("data/tech_default.toml").read_text()
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "t.toml").write_text(base)
    (study_file.parent / "tech.toml").symlink_to(shared / "t.toml")
    study_file.write_text('technology = "tech.toml"\n' + study_file.read_text())
    assert _run_cli(capsys, "run", str(study_file), "--quiet", "--trials", "2")[0] == 0
    copy = tmp_path / "a" / "copy"
    shutil.copytree(study_file.parent, copy, symlinks=True)  # the link as it is: to the shared table
    (study_file.parent / "tech.toml").unlink()  # the original's table, now another one
    (study_file.parent / "tech.toml").write_text(base.replace("value = 160.0", "value = 1000.0", 1))
    for args in (("status",), ("show", "0"), ("run", "--quiet", "--trials", "3")):
        code, out, err = _run_cli(capsys, args[0], str(copy / study_file.name), *args[1:])
        assert code == 0 and "dse:" not in err, (args, err)
    code, out, err = _run_cli(capsys, "show", str(copy / study_file.name), "0", "--format", "json")
    assert code == 0 and json.loads(out)["config"]["technology"] == str((copy / "tech.toml").resolve())
    # a plain table: the original's edited after the copy; the copy reads its own
    (copy / "tech.toml").unlink()
    (copy / "tech.toml").write_text(base)
    for f in copy.glob("tiny.*db"):
        f.unlink()
    assert _run_cli(capsys, "run", str(copy / study_file.name), "--quiet", "--trials", "2")[0] == 0
    again = tmp_path / "again"
    shutil.copytree(copy, again)
    (copy / "tech.toml").write_text(base.replace("value = 160.0", "value = 1000.0", 1))
    code, out, err = _run_cli(capsys, "show", str(again / study_file.name), "0", "--format", "json")
    assert code == 0 and "dse:" not in err, err
    assert json.loads(out)["config"]["technology"] == str(again / "tech.toml")


def test_a_study_refused_only_for_dses_new_dataset_size_default_says_how_to_read_it(study_file, capsys):
    """A file naming a dataset without dataset_size now gets the dataset's size; a study made before from the
    same file is refused as changed, and the message says the file is as it was and what to write."""
    text = study_file.read_text()
    assert "dataset_size = 5000\n" in text
    study_file.write_text(text.replace("dataset_size = 5000\n", ""))
    assert _run_cli(capsys, "run", str(study_file), "--quiet", "--trials", "2")[0] == 0
    study = open_study(load_study(study_file), create=False)
    stored = json.loads(json.dumps(study.user_attrs["dse_study_file"]))
    assert stored["base"]["workload"]["dataset_size"] == 50000
    stored["base"]["workload"]["dataset_size"] = 1281167  # as the previous dse recorded it
    study.set_user_attr("dse_study_file", stored)
    code, out, err = _run_cli(capsys, "status", str(study_file))
    assert code == 2 and "dataset_size: 1281167 -> 50000; the file names no dataset_size" in err, err
    assert "write dataset_size = 1281167 in the file's [workload] table" in err
    study_file.write_text(text.replace("dataset_size = 5000\n", "dataset_size = 1281167\n"))
    assert _run_cli(capsys, "status", str(study_file))[0] == 0


@pytest.mark.parametrize("strategy", ["joint", "hybrid"])
def test_a_run_and_a_study_read_through_the_api_leave_no_database_connection_open(study_file, connections,
                                                                                   strategy):
    """Every database storage a run opens (the study twice, the hybrid's training settings) and the one
    `dse.open_study` opens have their pooled connections closed when they are done (on PostgreSQL the server
    holds each one open; left to the garbage collector they close whenever it runs, with a ResourceWarning)."""
    import dse
    from studyfiles import with_strategy

    made, opened, closed = connections
    if strategy == "hybrid":
        study_file.write_text(with_strategy(study_file.read_text(), "hybrid", front_size=3))
    spec = load_study(study_file)
    assert run(spec, trials=4)["complete"] == 4
    assert len(made) >= (3 if strategy == "hybrid" else 2)  # the study twice; the hybrid's training settings
    assert opened and {id(c) for c in opened} <= {id(c) for c in closed}  # every connection made was closed
    del made[:], opened[:], closed[:]
    with dse.open_study(spec) as study:
        assert len(study.points()) == 4
        # the read connected, and keeps its connection until the block ends
        assert opened and not {id(c) for c in opened} & {id(c) for c in closed}
    assert {id(c) for c in opened} <= {id(c) for c in closed}


READS = {  # each command that reads a stored study, its arguments after the study file (out: a tmp path)
    "run": [],  # the second run: the budget is reached; its summary reads the stored study
    "status": [],
    "pareto": ["--format", "json"],
    "show": ["0", "--format", "json"],
    "export": ["--format", "json"],
    "plot": ["--out", "{out}"],
    "report": ["--out", "{out}.html"],
    "compare": ["{other}"],
}


@pytest.mark.parametrize("command", sorted(READS))
def test_every_command_reading_a_study_closes_its_database_connections(study_file, tmp_path, connections, cli,
                                                                       command):
    """`dse run`'s summary and the read commands close the storage they open when they are done (on
    PostgreSQL a server connection each; in a notebook or a long-lived process they would stay open)."""
    made, opened, closed = connections
    other = tmp_path / "other" / "tiny.toml"
    other.parent.mkdir()
    other.write_text(study_file.read_text().replace('name = "tiny"', 'name = "other"', 1))
    for f in (study_file, other) if command == "compare" else (study_file,):
        assert run(load_study(f), trials=4)["complete"] == 4
    del made[:], opened[:], closed[:]
    args = [a.format(out=tmp_path / "out", other=other) for a in READS[command]]
    r = cli(command, study_file, *args, *(["--trials", "4", "--quiet"] if command == "run" else []))
    assert r.returncode == 0, r.stderr
    assert made and opened  # the command read the study through a database storage
    assert {id(c) for c in opened} <= {id(c) for c in closed}, f"dse {command} left a connection open"


def test_show_costs_its_breakdown_with_no_database_connection_open(study_file, connections, cli, monkeypatch):
    """`dse show --layers` recomputes the trial's breakdown (the per-layer table takes a while) after it has
    read the trial and closed the study, not while holding a connection (a server's, on PostgreSQL)."""
    import dse.results.views as views

    made, opened, closed = connections
    assert run(load_study(study_file), trials=2)["complete"] == 2
    del made[:], opened[:], closed[:]
    held = []
    real = views.evaluate_hardware

    def costing(*a, **k):
        held.append({id(c) for c in opened} - {id(c) for c in closed})
        return real(*a, **k)

    monkeypatch.setattr(views, "evaluate_hardware", costing)
    r = cli("show", study_file, "1", "--layers", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert opened and held == [set()]  # the study was read, and closed before the breakdown


def test_a_study_dropped_without_closing_closes_its_connections_when_collected(study_file):
    """A study a notebook drops (never closed) has its pool closed by the collector through the storage,
    not connection by connection by the driver's finalizer (psycopg warns for each)."""
    import gc

    spec = load_study(study_file)
    study = open_study(spec)
    pool = study._storage._backend.engine.pool
    assert pool.checkedin() > 0
    del study
    gc.collect()
    assert pool.checkedin() == 0  # the pool it had, emptied (not a fresh pool in its place)


def test_a_hybrid_run_refused_at_its_start_leaves_no_database_connection_open(study_file, connections):
    """The hybrid refuses a sampler instance with its own selection (grid) after it opened its storage."""
    from dse.errors import UsageError
    from studyfiles import edit, with_strategy

    made, opened, closed = connections
    text = with_strategy(study_file.read_text(), "hybrid", front_size=3)
    study_file.write_text(edit('sampler = "nsga2"', 'sampler = "grid"', text))
    with pytest.raises(UsageError, match="give no sampler instance"):
        run(load_study(study_file), sampler=optuna.samplers.RandomSampler(seed=0))
    assert opened and {id(c) for c in opened} <= {id(c) for c in closed}


@pytest.mark.parametrize("storage", ["sqlite", "journal"])
def test_the_budget_tracker_catches_up_on_many_trials_in_one_listing_and_counts_them_right(tmp_path, storage):
    """A resumed run's first look at a large study (or another worker's batch) reads the new trials in one
    listing, not one by one (a 10^4-trial study: 50 s one by one), and counts them as a full reading does."""
    from dse.search.runner import BudgetTracker
    from dse.search.study import budget_state, open_storage

    url = f"sqlite:///{tmp_path}/t.db" if storage == "sqlite" else f"journal:///{tmp_path}/t.journal"
    study = optuna.create_study(storage=open_storage(url), directions=["minimize"])
    x = optuna.distributions.FloatDistribution(0, 1)

    def add(n):
        for i in range(n):
            t = study.ask({"x": x})
            if i % 7 == 3:
                study.tell(t, state=optuna.trial.TrialState.FAIL)  # interrupted: no reason, does not count
            elif i % 7 == 5:
                t.set_user_attr("fail_reason", "impossible configuration")
                study.tell(t, state=optuna.trial.TrialState.FAIL)
            elif i % 11 != 10:  # every 11th stays running
                study.tell(t, float(i))

    add(60)
    tracker = BudgetTracker(study)
    one_by_one = []  # trials read from the database one at a time (a journal's are in memory: no such read)
    if storage == "sqlite":
        backend = tracker._storage._backend  # under Optuna's trial cache
        real = backend.get_trial
        backend.get_trial = lambda tid: one_by_one.append(tid) or real(tid)
    got = tracker.refresh()
    assert len(one_by_one) <= BudgetTracker.READ_ONE_BY_ONE  # the rest from the one listing
    want = budget_state(study)
    assert (got["done"], got["active"], got["n"]) == (want["done"], want["active"], 60)
    add(40)  # another worker's batch, while some of the first ones were still running
    for t in study.get_trials(states=(optuna.trial.TrialState.RUNNING,))[:2]:
        study.tell(t.number, 1.0)
    got = tracker.refresh()
    want = budget_state(study)
    assert (got["done"], got["active"], got["n"]) == (want["done"], want["active"], 100)
