"""Application-side transitions on Django models (``transition_perform``): one conditional
UPDATE through the ORM, like ``transitions.py`` for SQLAlchemy."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.db import models as dj_models
from django.db.models.expressions import RawSQL
from django.db.utils import OperationalError as DjangoOperationalError

from .. import _local_wakeups
from .._clock import Clock, SystemClock
from .._graph import State, StateGraph
from .._policy import first_due
from ..errors import ConfigError, TransitionConflict, TransitionError
from ._dialects import dialect_for
from ._django import wake_key


def perform(obj: Any, to: State | str, clock: Clock | None) -> None:
    model = type(obj)
    graph: type[StateGraph] = _graph(model)
    target = graph.get_state(to)
    current = graph.states.get(obj.state)
    if current is None:
        raise TransitionError(f"{model.__name__} row is in unknown state {obj.state!r}")
    if target.name not in current.children:
        raise TransitionError(
            f"{graph.__name__}: no transition from {current.name} to {target.name}"
        )
    now = (clock or SystemClock()).now()
    alias = obj._state.db or "default"
    rows = model._base_manager.using(alias).filter(pk=obj.pk)
    if _move(rows, target, [current.name], now) != 1:
        raise TransitionConflict(
            f"{model.__name__} {obj.pk!r} is no longer in state {current.name}: "
            "someone else moved it first"
        )
    obj.state, obj.state_changed = target.name, now
    obj.state_next, obj.state_attempts = first_due(target, now), 0
    if _has_history(model):
        obj.state_history = [*(obj.state_history or []), [target.name, now.isoformat()]]


def perform_many(queryset: Any, to: State | str, clock: Clock | None) -> int:
    graph = _graph(queryset.model)
    target = graph.get_state(to)
    sources = [s.name for s in target.parents.values()]
    if not sources:
        raise TransitionError(f"{graph.__name__}: no state has a transition to {target.name}")
    return _move(queryset, target, sources, (clock or SystemClock()).now())


def _wake_workers(alias: str, table: str) -> None:
    notify = dialect_for(connections[alias].vendor).notify_sql()
    if notify:
        with connections[alias].cursor() as cursor:
            cursor.execute(notify.replace(":table", "%s"), [table])
    key = wake_key(alias)
    transaction.on_commit(lambda: _local_wakeups.wake(key), using=alias)


def _graph(model: Any) -> type[StateGraph]:
    graph = getattr(model, "state_graph", None)
    if not (isinstance(graph, type) and issubclass(graph, StateGraph)):
        raise ConfigError(f"{model.__name__} has no state_graph")
    return graph


def _has_history(model: Any) -> bool:
    return any(f.name == "state_history" for f in model._meta.concrete_fields)


def _move(rows: Any, target: State, sources: Iterable[str], now: datetime) -> int:
    alias = rows.db
    model = rows.model
    conn = connections[alias]
    dialect = dialect_for(conn.vendor)
    values: dict[str, Any] = {
        "state": target.name, "state_changed": now,
        "state_next": first_due(target, now), "state_attempts": 0,
    }
    if _has_history(model):
        field = model._meta.get_field("state_history")
        append = dialect.history_append(model._meta.db_table, field.db_type(conn),
                                        "CAST(%s AS text)", "CAST(%s AS text)")
        values["state_history"] = RawSQL(
            append, (target.name, now.isoformat()), output_field=dj_models.JSONField()
        )
    try:
        moved = int(rows.filter(state__in=list(sources)).update(**values))
    except DjangoOperationalError as exc:
        if dialect.name == "sqlite" and "locked" in str(exc):
            # SQLite cannot upgrade a read transaction whose snapshot is out of date: someone
            # committed since this transaction first read, so it may have moved these rows.
            raise TransitionConflict(
                f"{model._meta.db_table}: the database changed since this transaction began "
                "reading; roll back and try the transition in a new transaction"
            ) from exc
        raise
    if moved:
        _wake_workers(alias, model._meta.db_table)
    return moved
