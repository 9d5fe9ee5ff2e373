"""Optuna's RDB storage with a faster trial listing, single-trial read and creation from a template.

Optuna lists a study's trials through SQLAlchemy's ORM: an object per row of every trial table (a trial of
dse's holds a dozen parameters and half a dozen attributes), each distribution's JSON parsed again for
every parameter of every trial. On a study of 10^4 trials that took 12 of ``dse status``'s 13 seconds,
and every read command, a resumed run's start and the end of a run pays it once per process (Optuna caches
finished trials after their first read).

:class:`FastRDBStorage` overrides only that listing (``_get_trials``, which Optuna's trial cache and
every ``get_trials`` call go through): the same rows, read with plain SQL ``SELECT`` s on Optuna's own table
definitions, one per table, and built into the same :class:`~optuna.trial.FrozenTrial` s (each distinct
distribution JSON parsed once: trials of one knob share its distribution object, which nothing
modifies). ``tests/dse/test_rdb.py`` checks the listing equals Optuna's, field by field, on SQLite and on
PostgreSQL. Every other write than the one below is Optuna's.

It reads each table at its own moment, as Optuna's ORM listing does: the trials first, then the rows of
the other tables that belong to them (chosen by trial id, not by state, so a trial whose state changed
in between still gets all its rows). A trial finished when it was listed has all its rows written
already (Optuna writes a trial's values and its state in one transaction, and a finished trial takes no
more attributes), so it comes out whole; a running one may show a newer attribute than its state, as in
Optuna's own listing, and is read again next time. ``get_trial`` reads one trial the same way.

Creating a trial from a template (how the hybrid enters each costed point, and how Optuna enqueues and
retries trials) wrote every parameter, value and attribute with statements of its own, each parameter
looking up an earlier record of its name first: about 50 statements a trial; the quick start's run with one
worker took 12.4-13.0 s so, 8.2-8.3 s with the creation below (docs/benchmarks.md, "Entering trials").
``_get_prepared_new_trial`` writes the same rows with one ``INSERT`` per table, in Optuna's transaction; the
tests read the trials back with Optuna's own storage and compare them with trials Optuna created from the
same templates.
"""

from __future__ import annotations

import datetime
import json
from collections import defaultdict

import sqlalchemy
from optuna import distributions
from optuna.storages import RDBStorage
from optuna.storages._rdb import models
from optuna.trial import FrozenTrial, TrialState

__all__ = ["FastRDBStorage"]

_T = models.TrialModel.__table__
_PARAMS = models.TrialParamModel.__table__
_VALUES = models.TrialValueModel.__table__
_USER = models.TrialUserAttributeModel.__table__
_SYSTEM = models.TrialSystemAttributeModel.__table__
_INTERMEDIATE = models.TrialIntermediateValueModel.__table__


def _local(utc: datetime.datetime | None) -> datetime.datetime | None:
    """A stored naive UTC time as naive local time (what Optuna's ``TrialModel.datetime_start`` returns)."""
    return None if utc is None else utc.replace(tzinfo=datetime.timezone.utc).astimezone().replace(tzinfo=None)


def _read(conn, where: list, states_in: list = ()) -> list[FrozenTrial]:
    """The trials the conditions ``where`` (and ``states_in``) on the trials table select, each with its rows
    of the other tables, in trial-id order (see the module's docstring)."""
    rows = conn.execute(sqlalchemy.select(_T.c.trial_id, _T.c.number, _T.c.state, _T.c.datetime_start,
                                          _T.c.datetime_complete).where(*where, *states_in)
                        .order_by(_T.c.trial_id)).all()
    if not rows:
        return []
    # the other tables' rows by the trials' ids, not their states: a trial whose state changed since
    # the SELECT above still gets all its rows (rows of trials not listed are ignored)
    ids = sqlalchemy.select(_T.c.trial_id).where(*where).scalar_subquery()

    def of(table, *cols, order=None):
        q = sqlalchemy.select(table.c.trial_id, *cols).where(table.c.trial_id.in_(ids))
        by: dict[int, list] = defaultdict(list)
        for r in conn.execute(q.order_by(order) if order is not None else q).all():
            by[r[0]].append(r[1:])
        return by

    params = of(_PARAMS, _PARAMS.c.param_name, _PARAMS.c.param_value, _PARAMS.c.distribution_json,
                order=_PARAMS.c.param_id)
    values = of(_VALUES, _VALUES.c.objective, _VALUES.c.value, _VALUES.c.value_type)
    # attributes by key, as Optuna gives them (its listing on SQLite, its get_trial everywhere)
    user = of(_USER, _USER.c.key, _USER.c.value_json, order=_USER.c.key)
    system = of(_SYSTEM, _SYSTEM.c.key, _SYSTEM.c.value_json, order=_SYSTEM.c.key)
    steps = of(_INTERMEDIATE, _INTERMEDIATE.c.step, _INTERMEDIATE.c.intermediate_value,
               _INTERMEDIATE.c.intermediate_value_type)
    parsed: dict[str, distributions.BaseDistribution] = {}

    def dist(js: str) -> distributions.BaseDistribution:
        d = parsed.get(js)
        if d is None:
            d = parsed[js] = distributions.json_to_distribution(js)
        return d

    value_of = models.TrialValueModel.stored_repr_to_value
    step_of = models.TrialIntermediateValueModel.stored_repr_to_intermediate_value
    out = []
    for tid, number, state, start, complete in rows:
        vals = None
        if values.get(tid):
            vals = [0.0] * len(values[tid])
            for objective, v, kind in values[tid]:
                vals[objective] = value_of(v, kind)
        ps = params.get(tid, ())
        out.append(FrozenTrial(
            number=number, state=TrialState(state), value=None, values=vals,
            datetime_start=_local(start), datetime_complete=_local(complete),
            params={name: dist(js).to_external_repr(v) for name, v, js in ps},
            distributions={name: dist(js) for name, _, js in ps},
            user_attrs={k: json.loads(v) for k, v in user.get(tid, ())},
            system_attrs={k: json.loads(v) for k, v in system.get(tid, ())},
            intermediate_values={s: step_of(v, kind) for s, v, kind in steps.get(tid, ())},
            trial_id=tid))
    return out


class FastRDBStorage(RDBStorage):
    """:class:`optuna.storages.RDBStorage` listing and reading trials with one plain ``SELECT`` per table, and
    creating a trial from a template with one ``INSERT`` per table (see the module's docstring); the trials and
    rows are the ones Optuna's own code gives."""

    #: (study id, parameter name) -> the distribution of one stored record of it (see _get_prepared_new_trial)
    _known: dict | None = None

    def _get_trials(self, study_id: int, states, included_trial_ids: set[int],
                    trial_id_greater_than: int) -> list[FrozenTrial]:
        included = {i for i in included_trial_ids if i <= trial_id_greater_than}
        where = [_T.c.study_id == study_id]
        if included and trial_id_greater_than > -1:
            # the ids written into the statement (integers): no bound variables, so no database's limit on them
            ids_in = sqlalchemy.bindparam("included_ids", sorted(included), expanding=True, literal_execute=True)
            where.append(sqlalchemy.or_(_T.c.trial_id.in_(ids_in), _T.c.trial_id > trial_id_greater_than))
        elif trial_id_greater_than > -1:
            where.append(_T.c.trial_id > trial_id_greater_than)
        with self.engine.connect() as conn:
            study = models.StudyModel.__table__
            if conn.execute(sqlalchemy.select(study.c.study_id).where(study.c.study_id == study_id)).first() is None:
                raise KeyError(models.NOT_FOUND_MSG)  # as Optuna's listing
            states_in = [] if states is None else [_T.c.state.in_(list(states))]
            return _read(conn, where, states_in)

    def delete_study(self, study_id: int) -> None:
        super().delete_study(study_id)
        if self._known:  # (SQLite gives a deleted study's id to the next one it creates)
            for key in [k for k in self._known if k[0] == study_id]:
                del self._known[key]

    def get_trial(self, trial_id: int) -> FrozenTrial:
        """The trial ``trial_id`` read as the listing reads (Optuna's loads it through the ORM, a query per
        table and relationship; the hybrid reads the number of every point it enters)."""
        with self.engine.connect() as conn:
            got = _read(conn, [_T.c.trial_id == trial_id])
        if not got:
            raise KeyError(models.NOT_FOUND_MSG)  # as Optuna's
        return got[0]

    def _get_prepared_new_trial(self, study_id: int, template_trial: FrozenTrial | None, session) -> models.TrialModel:
        """A new trial from ``template_trial`` written with one ``INSERT`` per table (Optuna writes each
        parameter, value and attribute with queries of its own: about 50 statements for a trial of dse's). The
        same rows as Optuna's, in the same transaction, under the study's row lock :meth:`_create_new_trial`
        takes; each parameter's distribution checked against one earlier record of that parameter in the study,
        as Optuna checks it (read once per parameter name and process: compatibility is an equivalence, and a
        study's stored records do not change; forgotten when the study is deleted)."""
        if template_trial is None:
            return super()._get_prepared_new_trial(study_id, template_trial, session)
        t = template_trial
        # RUNNING until every row is written, as Optuna does (only a RUNNING trial takes rows)
        trial = models.TrialModel(study_id=study_id, number=None, state=TrialState.RUNNING,
                                  datetime_start=t.datetime_start, datetime_complete=t.datetime_complete)
        session.add(trial)
        session.flush()
        tid = trial.trial_id
        if t.values is not None and len(t.values) > 1:
            values = list(enumerate(t.values))
        else:
            values = [] if t.value is None else [(0, t.value)]
        rows = {_VALUES: [dict(zip(("trial_id", "objective", "value", "value_type"),
                                   (tid, k, *models.TrialValueModel.value_to_stored_repr(v)))) for k, v in values]}
        if self._known is None:
            self._known = {}
        known = self._known  # (only records read back: this transaction's own may yet roll back)
        unknown = [n for n in t.params if (study_id, n) not in known]
        if unknown:
            first = sqlalchemy.select(_PARAMS.c.param_name, sqlalchemy.func.min(_PARAMS.c.param_id)).join(
                _T, _T.c.trial_id == _PARAMS.c.trial_id).where(
                _T.c.study_id == study_id, _PARAMS.c.param_name.in_(unknown)).group_by(_PARAMS.c.param_name)
            ids = [pid for _, pid in session.execute(first).all()]
            if ids:
                for name, js in session.execute(sqlalchemy.select(_PARAMS.c.param_name, _PARAMS.c.distribution_json)
                                                .where(_PARAMS.c.param_id.in_(ids))).all():
                    known[(study_id, name)] = distributions.json_to_distribution(js)
        rows[_PARAMS] = []
        for name, value in t.params.items():
            d = t.distributions[name]
            if (study_id, name) in known:
                distributions.check_distribution_compatibility(known[(study_id, name)], d)
            rows[_PARAMS].append({"trial_id": tid, "param_name": name, "param_value": d.to_internal_repr(value),
                                  "distribution_json": distributions.distribution_to_json(d)})
        rows[_USER] = [{"trial_id": tid, "key": k, "value_json": json.dumps(v)} for k, v in t.user_attrs.items()]
        rows[_SYSTEM] = [{"trial_id": tid, "key": k, "value_json": json.dumps(v)} for k, v in t.system_attrs.items()]
        rows[_INTERMEDIATE] = [dict(zip(("trial_id", "step", "intermediate_value", "intermediate_value_type"), (
            tid, s, *models.TrialIntermediateValueModel.intermediate_value_to_stored_repr(v))))
            for s, v in t.intermediate_values.items()]
        for table, rs in rows.items():
            if rs:
                session.execute(sqlalchemy.insert(table), rs)
        trial.state = t.state
        trial.number = trial.count_past_trials(session)
        session.add(trial)
        return trial
