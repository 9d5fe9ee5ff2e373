"""Comparing what a study was made from (``StudySpec.identity()``) with a study file as it is now."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["identity_change", "model_change", "checked_trial", "trial_model_change", "ABSENT", "MODEL_FROM_ATTR"]


def identity_change(stored: dict, now: dict) -> str | None:
    """The first difference between two :meth:`StudySpec.identity` documents, as "what: old -> new"
    (None when they are equal)."""
    def show(v) -> str:
        return "(absent)" if v is ABSENT else json.dumps(v, default=str)

    def walk(a, b, path):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in list(a) + [k for k in b if k not in a]:
                d = walk(a.get(k, ABSENT), b.get(k, ABSENT), f"{path}.{k}" if path else str(k))
                if d:
                    return d
            return None
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and path != "space" \
                and not path.startswith("space."):
            for i, (x, y) in enumerate(zip(a, b)):
                d = walk(x, y, f"{path}.{i}")
                if d:
                    return d
            return None
        if a != b:
            if path.startswith("file contents.") and a is not ABSENT and b is not ABSENT:
                return f"what dse reads from {path.removeprefix('file contents.')} changed (digest {a} -> {b})"
            return f"{path}: {show(a)} -> {show(b)}"
        return None

    stored = json.loads(json.dumps(stored, default=str))  # both sides as JSON sees them
    now = json.loads(json.dumps(now, default=str))
    return walk(stored, now, "")


#: a value missing on one side
ABSENT = object()


#: the study user attribute naming the first trial a run's ``--accept-changes`` accepted under a changed model:
#: a run checks the trials from it on (a read command checks from the first)
MODEL_FROM_ATTR = "dse_model_from"
#: at most this many trials are read to find one to re-cost (the first trials of a study are almost always
#: complete)
MODEL_CHECK_TRIALS = 8
#: a stored figure and the same figure re-costed differ beyond this, relative and absolute (fractions near
#: zero, such as energy_saving, move by more relative to themselves): another model made it. A refinement
#: below it (the equal-chunk input passes moved the presets' speed-ups and energies by at most 2e-7, the zoo's
#: by 9e-6, its energy_saving of 0.0027 by 2e-6) changes no figure dse prints, and leaves a study resumable
MODEL_TOLERANCE, MODEL_ABS_TOLERANCE = 1e-4, 1e-5


def checked_trial(study, start: int = 0):
    """The trial :func:`model_change` re-costs: the first complete one with its metrics and configuration from
    number ``start`` on (at most :data:`MODEL_CHECK_TRIALS` read, not a listing), or None."""
    from optuna.trial import TrialState

    st, sid = study._storage, study._study_id
    for number in range(start, start + MODEL_CHECK_TRIALS):
        try:
            t = st.get_trial(st.get_trial_id_from_study_id_trial_number(sid, number))
        except KeyError:
            return None  # no trial to check
        if t.state == TrialState.COMPLETE and isinstance(t.user_attrs.get("metrics"), dict) \
                and "config" in t.user_attrs:
            return t
    return None


#: (storage URL, the checked trial: id, start time, what it stored) -> :func:`trial_model_change`'s answer: a
#: run opens its study several times (the probe, the run, the summary), and the zoo's check costs about 0.5 s.
#: Keyed by the trial, not the study: a study file deleted and made again reuses the study's id
_MODEL_CHECKED: dict[tuple, str | None] = {}


def model_change(study, start: int = 0, *, url: str | None = None, spec=None) -> str | None:
    """Whether the models that computed the study's stored figures are this dse's: its first complete trial
    from number ``start`` on (:func:`checked_trial`), re-costed with this dse's accelerator model at the GP
    fraction it recorded, must give the hardware figures it stored (``dse export`` and ``dse show`` recompute
    them so), and its accuracy proxy's version (which trials record from this dse on:
    ``surrogate.cache_version``) must be this one's. A description of the first difference ("trial 48's
    speedup: 2.944 stored, 2.168 by this dse's model"), or None. Costs one configuration (0.06-0.08 s for the
    quick start's ResNet-18, about 0.5 s for the zoo's 16 models). With the study's storage ``url``, the
    answer is remembered for the process (:data:`_MODEL_CHECKED`). ``spec``: the study file, whose files the
    trial is costed with (:func:`with_current_files`)."""
    t = checked_trial(study, start)
    if t is None or url is None:
        return None if t is None else trial_model_change(t, spec)
    key = (url, t._trial_id, t.datetime_start, json.dumps([t.user_attrs["metrics"], t.user_attrs["config"],
                                                            t.user_attrs.get("surrogate")], sort_keys=True))
    if key not in _MODEL_CHECKED:
        change = trial_model_change(t, spec)
        if change is not None and "cannot be costed" in change:
            return change  # (a file it names may be restored: looked at again next time)
        _MODEL_CHECKED[key] = change
    return _MODEL_CHECKED[key]


def trial_model_change(t, spec=None) -> str | None:
    """:func:`model_change` for the stored trial ``t`` (with the files the study file ``spec`` names)."""
    import math

    from dse.config.configuration import Configuration
    from dse.evaluation.evaluator import evaluate_hardware
    from models.surrogate import CACHE_VERSION

    stored = t.user_attrs["metrics"]
    version = t.user_attrs.get("surrogate", {}).get("cache_version")
    if version is not None and version != CACHE_VERSION:
        return f"trial {t.number}'s accuracy came from the accuracy proxy's version {version}, this dse's is " \
               f"{CACHE_VERSION}"
    try:
        stored_cfg = t.user_attrs["config"]
        cfg = Configuration.from_dict(stored_cfg if spec is None else with_current_files(stored_cfg, spec),
                                      where=f"trial {t.number} config")
        now = evaluate_hardware(cfg, float(stored.get("gp_fraction", 0.0)))["metrics"]
    except Exception as e:  # a configuration this dse cannot read or cost: made by another one, or a file it
        why = str(e).splitlines()[0] if str(e).strip() else type(e).__name__  # names is missing now
        return f"trial {t.number}'s configuration cannot be costed by this dse ({why})"
    for m, v in now.items():
        if m not in stored or not isinstance(stored[m], (int, float)) or not isinstance(v, (int, float)):
            continue
        a, b = float(stored[m]), float(v)
        same = math.isclose(a, b, rel_tol=MODEL_TOLERANCE, abs_tol=MODEL_ABS_TOLERANCE)
        if not (same or (math.isnan(a) and math.isnan(b))):
            return f"trial {t.number}'s {m}: {a:.6g} stored, {b:.6g} by this dse's model"
    return None


def relative_paths(identity: dict, written: dict[str, str]) -> dict:
    """``identity`` with the files it names (technology table, workload files, and the keys of their contents)
    as the study file writes them where it writes them relatively (``written``: absolute path -> the path as
    written, :meth:`StudySpec.relative_files`): a study moved or copied with the files it names keeps its
    identity (they were absolute: a copied folder's study was refused as made from another file), a symlinked
    table included. A path written as an absolute one stays absolute (a shared table: a study file copied
    elsewhere still names it). A stored identity of either form compares with a new one."""
    def rel(v):
        return written.get(v, v) if isinstance(v, str) else v

    out = dict(identity)
    base = out.get("base")
    if isinstance(base, dict):
        base = out["base"] = dict(base)
        if "technology" in base:
            base["technology"] = rel(base["technology"])
        w = base.get("workload")
        if isinstance(w, dict):
            w = base["workload"] = dict(w)
            if isinstance(w.get("models"), list):
                w["models"] = [rel(m) for m in w["models"]]
            if isinstance(w.get("model_args"), dict):
                w["model_args"] = {rel(k): v for k, v in w["model_args"].items()}
    if isinstance(out.get("file contents"), dict):
        out["file contents"] = {rel(k): v for k, v in out["file contents"].items()}
    return out


def with_current_files(config: dict, spec) -> dict:
    """A trial's stored configuration naming the files the study's file names now (``spec``: its base
    configuration, and its relatively written files, :meth:`StudySpec.relative_files`) where the
    stored file is the same file named the same way relative to the study file: a trial stores absolute
    paths, which a study moved or copied with its files does not have (a copy read the original's files).
    The study's identity checks those hold what its trials were costed with. A stored file named otherwise
    stays the trial's own (after an accepted change to another table, the earlier trials keep theirs); a
    configuration naming another number of workload models is returned as it is."""
    from models import importers

    base = spec.base
    tech, models = config.get("technology"), (config.get("workload") or {}).get("models")
    now = list(base.workload.models)
    if tech == base.technology and models == now:
        return config  # (every trial of a study where it was made)
    written = spec.relative_files()

    def same(stored, now) -> bool:  # the stored path ends as the study file writes the current one
        tail = [p for p in Path(written.get(now, "")).parts if p not in ("..", ".")]
        return bool(tail) and isinstance(stored, str) and list(Path(stored).parts[-len(tail):]) == tail

    swap = {}
    if isinstance(models, list) and len(models) == len(now):
        swap = {m: n for m, n in zip(models, now)
                if m != n and same(m, n) and importers.is_file_model(m) and importers.is_file_model(n)}
    new_tech = base.technology if tech and base.technology and tech != base.technology and \
        same(tech, base.technology) else None
    if not swap and new_tech is None:
        return config
    out = dict(config)
    if new_tech is not None:
        out["technology"] = new_tech
    if swap:
        w = out["workload"] = dict(out["workload"])
        w["models"] = [swap.get(m, m) for m in models]
        if isinstance(w.get("model_args"), dict):
            w["model_args"] = {swap.get(k, k): v for k, v in w["model_args"].items()}
    return out
