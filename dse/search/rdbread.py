"""Optuna's RDB storage with a faster trial listing.

Optuna lists a study's trials through SQLAlchemy's ORM: an object per row of every trial table (a trial of
dse's holds a dozen parameters and half a dozen attributes), each distribution's JSON parsed again for
every parameter of every trial. On a study of 10^4 trials that took 12 of ``dse status``'s 13 seconds,
and every read command, a resumed run's start and the end of a run pays it once per process (Optuna caches
finished trials after their first read).

:class:`ListingRDBStorage` overrides only that listing (``_get_trials``, which Optuna's trial cache and
every ``get_trials`` call go through): the same rows, read with plain SQL ``SELECT`` s on Optuna's own table
definitions, one per table, and built into the same :class:`~optuna.trial.FrozenTrial` s (each distinct
distribution JSON parsed once: trials of one knob share its distribution object, which nothing
modifies). Everything else, every write included, is Optuna's. ``tests/dse/test_rdbread.py``
checks the listing equals Optuna's, field by field, on SQLite and on PostgreSQL.

It reads each table at its own moment, as Optuna's ORM listing does: the trials first, then the rows of
the other tables that belong to them (chosen by trial id, not by state, so a trial whose state changed
in between still gets all its rows). A trial finished when it was listed has all its rows written
already (Optuna writes a trial's values and its state in one transaction, and a finished trial takes no
more attributes), so it comes out whole; a running one may show a newer attribute than its state, as in
Optuna's own listing, and is read again next time.
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

__all__ = ["ListingRDBStorage"]

_T = models.TrialModel.__table__
_PARAMS = models.TrialParamModel.__table__
_VALUES = models.TrialValueModel.__table__
_USER = models.TrialUserAttributeModel.__table__
_SYSTEM = models.TrialSystemAttributeModel.__table__
_INTERMEDIATE = models.TrialIntermediateValueModel.__table__


def _local(utc: datetime.datetime | None) -> datetime.datetime | None:
    """A stored naive UTC time as naive local time (what Optuna's ``TrialModel.datetime_start`` returns)."""
    return None if utc is None else utc.replace(tzinfo=datetime.timezone.utc).astimezone().replace(tzinfo=None)


class ListingRDBStorage(RDBStorage):
    """:class:`optuna.storages.RDBStorage` listing trials with one plain ``SELECT`` per table (see the
    module's docstring); the trials it lists are the ones Optuna's listing gives."""

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

