"""Comparing what a study was made from (``StudySpec.identity()``) with a study file as it is now."""

from __future__ import annotations

import json

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


def model_change(study, start: int = 0, *, url: str | None = None) -> str | None:
    """Whether the models that computed the study's stored figures are this dse's: its first complete trial
    from number ``start`` on (:func:`checked_trial`), re-costed with this dse's accelerator model at the GP
    fraction it recorded, must give the hardware figures it stored (``dse export`` and ``dse show`` recompute
    them so), and its accuracy proxy's version (which trials record from this dse on:
    ``surrogate.cache_version``) must be this one's. A description of the first difference ("trial 48's
    speedup: 2.944 stored, 2.168 by this dse's model"), or None. Costs one configuration (0.06-0.08 s for the
    quick start's ResNet-18, about 0.5 s for the zoo's 16 models). With the study's storage ``url``, the
    answer is remembered for the process (:data:`_MODEL_CHECKED`)."""
    t = checked_trial(study, start)
    if t is None or url is None:
        return None if t is None else trial_model_change(t)
    key = (url, t._trial_id, t.datetime_start, json.dumps([t.user_attrs["metrics"], t.user_attrs["config"],
                                                            t.user_attrs.get("surrogate")], sort_keys=True))
    if key not in _MODEL_CHECKED:
        change = trial_model_change(t)
        if change is not None and "cannot be costed" in change:
            return change  # (a file it names may be restored: looked at again next time)
        _MODEL_CHECKED[key] = change
    return _MODEL_CHECKED[key]


def trial_model_change(t) -> str | None:
    """:func:`model_change` for the stored trial ``t``."""
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
        cfg = Configuration.from_dict(t.user_attrs["config"], where=f"trial {t.number} config")
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
