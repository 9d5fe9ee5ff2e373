"""What a stored study was made by, checked when it is opened. A study whose stored figures another version of
dse's models computed: a run refuses to add trials that
would not compare with them (unless --accept-changes), a read command warns in one line. Before, a study made
by an older dse (plain-BP energy on the reference accelerator 111.3 kJ there, 74.1 kJ now) was resumed in
silence: one front held 122 points of the old model and 32 of the new. A study made before studies recorded
their file, and one run with another strategy than its file's, are named as such."""

from __future__ import annotations

import json
import shutil

import optuna
import sqlalchemy

from dse.search.identity import MODEL_FROM_ATTR, model_change


def _copy(small, tmp_path):
    for f in small.parent.glob(small.stem + ".*"):
        shutil.copy(f, tmp_path / f.name)
    return tmp_path / small.name


def _db(p):
    return f"sqlite:///{p.with_suffix('.db')}"


def _edit_stored(p, number: int, edit) -> None:
    """Rewrite a stored attribute of trial ``number`` as another dse would have stored it (a finished trial
    takes no writes through Optuna)."""
    eng = sqlalchemy.create_engine(_db(p))
    try:
        with eng.begin() as c:
            tid = c.execute(sqlalchemy.text("SELECT trial_id FROM trials WHERE number = :n AND study_id = "
                                            "(SELECT study_id FROM studies WHERE study_name = 'tiny')"),
                            {"n": number}).scalar_one()
            for key in ("metrics", "surrogate"):
                v = json.loads(c.execute(sqlalchemy.text("SELECT value_json FROM trial_user_attributes WHERE "
                                                         "trial_id = :t AND key = :k"), {"t": tid, "k": key}
                                         ).scalar_one())
                new = edit(key, v)
                c.execute(sqlalchemy.text("UPDATE trial_user_attributes SET value_json = :v WHERE trial_id = :t "
                                          "AND key = :k"), {"v": json.dumps(new), "t": tid, "k": key})
    finally:
        eng.dispose()


def _study(p):
    return optuna.load_study(study_name="tiny", storage=_db(p))


def test_a_study_of_this_dse_passes_the_check(cli, ran_study, tmp_path):
    p = _copy(ran_study, tmp_path)
    assert model_change(_study(p)) is None
    assert _study(p).trials[0].user_attrs["surrogate"]["cache_version"] >= 4
    r = cli("status", p)
    assert r.returncode == 0 and "warning" not in r.stderr


def test_figures_another_model_computed_stop_a_run_and_are_named_by_read_commands(cli, ran_study, tmp_path):
    p = _copy(ran_study, tmp_path)
    first = _study(p).trials[0]
    speedup = first.user_attrs["metrics"]["speedup"]
    _edit_stored(p, first.number, lambda key, v: {**v, "speedup": v["speedup"] * 1.3} if key == "metrics" else v)
    change = model_change(_study(p))
    assert change == f"trial {first.number}'s speedup: {speedup * 1.3:.6g} stored, {speedup:.6g} by this dse's model"

    n = len(_study(p).trials)
    r = cli("run", p, "--trials", n + 2, "--quiet")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "holds figures this dse does not reproduce" in line and change in line and "--accept-changes" in line
    assert len(_study(p).trials) == n  # nothing added

    for cmd in (("status", p), ("pareto", p), ("export", p, "--out", tmp_path / "knee.toml")):
        r = cli(*cmd)
        assert r.returncode == 0, r.stderr
        warned = [ln for ln in r.stderr.splitlines() if ln.startswith("dse: warning:")]
        assert len(warned) == 1 and change in warned[0] and "Traceback" not in r.stderr, cmd

    # accepted: the run goes on, and later runs check the trials made from then on
    r = cli("run", p, "--trials", n + 2, "--accept-changes", "--quiet")
    assert r.returncode == 0, r.stderr
    study = _study(p)
    assert study.user_attrs[MODEL_FROM_ATTR] == n and len(study.trials) == n + 2
    assert model_change(study, n) is None and model_change(study) == change
    r = cli("run", p, "--trials", n + 3, "--quiet")
    assert r.returncode == 0, r.stderr


def test_accuracy_from_another_version_of_the_proxy_is_named(ran_study, tmp_path):
    p = _copy(ran_study, tmp_path)
    _edit_stored(p, 0, lambda key, v: {**v, "cache_version": 3} if key == "surrogate" else v)
    assert "accuracy proxy's version 3" in model_change(_study(p))
    _edit_stored(p, 0, lambda key, v: {k: x for k, x in v.items() if k != "cache_version"} if key == "surrogate"
                 else v)  # recorded only since: a trial without it is judged by its hardware figures alone
    assert model_change(_study(p)) is None


def test_a_study_made_before_studies_recorded_their_file_is_checked_against_its_trials(cli, ran_study, tmp_path):
    """A study with no recorded file was taken as made by the file at hand: a file whose list of choices
    differed ran a whole budget of trials that Optuna refused one by one, and the run said the space was
    exhausted."""
    p = _copy(ran_study, tmp_path)
    eng = sqlalchemy.create_engine(_db(p))
    with eng.begin() as c:
        c.execute(sqlalchemy.text("DELETE FROM study_user_attributes WHERE key = 'dse_study_file'"))
    eng.dispose()
    text = p.read_text()
    assert "pred_width = [8, 32]" in text
    p.write_text(text.replace("pred_width = [8, 32]", "pred_width = [8, 16]"))
    n = len(_study(p).trials)
    r = cli("run", p, "--trials", n + 2, "--quiet")
    assert r.returncode == 2 and "did not record" in r.stderr and "space.training.pred_width" in r.stderr, r.stderr
    assert len(_study(p).trials) == n
    p.write_text(text)  # the file that made it: adopted, as before
    r = cli("run", p, "--trials", n + 2, "--quiet")
    assert r.returncode == 0, r.stderr
    assert "dse_study_file" in _study(p).user_attrs and len(_study(p).trials) == n + 2


def test_a_study_run_with_another_strategy_is_read_as_run_and_resumed_only_with_it(cli, study_file):
    """`dse run FILE --strategy joint` on a file of the hybrid: every read command then said the study was made
    from a different study file and suggested --accept-changes, which would turn it into a hybrid study; then
    they refused it until the file was edited. They read it as the strategy it ran with; a run without that
    --strategy is refused (it would mix two searches in one study) and says how to resume."""
    import dse

    text = study_file.read_text()
    assert 'strategy = "joint"' not in text
    study_file.write_text(text.replace("[study]", '[study]\nstrategy = "hybrid"', 1))
    assert cli("run", study_file, "--strategy", "joint", "--trials", 3, "--quiet").returncode == 0
    r = cli("status", study_file, "--json")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    st = json.loads(r.stdout)
    assert st["strategy"] == "joint" and st["trials"]["complete"] == 3 and "training" not in st, st
    for cmd in (("pareto", study_file), ("show", study_file, "0"),
                ("export", study_file, "--out", study_file.parent / "best.toml")):
        r = cli(*cmd)
        assert r.returncode == 0 and "dse:" not in r.stderr, (cmd, r.stderr)  # no error, no warning
    with dse.open_study(study_file) as study:
        assert study.spec.strategy == "joint" and len(study.points()) == 3
    r = cli("run", study_file, "--trials", 4, "--quiet")
    assert r.returncode == 2 and "holds trials of strategy 'joint', not 'hybrid'" in r.stderr, r.stderr
    assert "give dse run --strategy joint" in r.stderr and "--accept-changes" not in r.stderr, r.stderr
    assert cli("run", study_file, "--strategy", "joint", "--trials", 4, "--quiet").returncode == 0
    study_file.write_text(text.replace("[study]", '[study]\nstrategy = "joint"', 1))
    assert cli("status", study_file).returncode == 0
    assert cli("run", study_file, "--trials", 5, "--quiet").returncode == 0


def test_a_run_on_workers_says_the_reason_its_workers_recorded(study_file):
    """`dse run --workers N` prints Strategy.ended (the workers' figures do not come back): it said the hybrid's
    space was exhausted when the workers had recorded that their settings failed with an error."""
    from dse.search.strategies.hybrid import Hybrid
    from dse.search.study import open_study, record_end
    from dse.search.studyfile import load_study

    spec = load_study(study_file).with_overrides(strategy="hybrid")
    study = open_study(spec)
    assert Hybrid.ended(spec, study) == Hybrid.stop_reason  # nothing recorded: the strategy's own reason
    record_end(study, "its last 3 training settings failed with an error (the last: ValueError: a clash)")
    assert "failed with an error" in Hybrid.ended(spec, open_study(spec, create=False))


def test_a_study_made_again_at_the_same_path_is_checked_afresh(cli, ran_study, tmp_path):
    """The check is remembered within a process; keyed by the study, a study file deleted and made again (SQLite
    gives the new study the old one's id) inherited the old study's verdict: a fresh run of this dse was refused
    as made by another model."""
    p = _copy(ran_study, tmp_path)
    _edit_stored(p, 0, lambda key, v: {**v, "speedup": v["speedup"] * 1.3} if key == "metrics" else v)
    r = cli("status", p)
    assert r.returncode == 0 and "dse: warning:" in r.stderr
    p.with_suffix(".db").unlink()
    r = cli("run", p, "--quiet")
    assert r.returncode == 0 and "does not reproduce" not in r.stderr, r.stderr
    r = cli("status", p)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
