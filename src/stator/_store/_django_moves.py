"""Transitions made by application code on Django models (``transition_perform``): the one
move (``stator._moves``) as one conditional UPDATE through the ORM, so it runs on the
queryset's own database and filters, in Django's transaction."""

from __future__ import annotations

from typing import Any

from django.db import connections, transaction
from django.db import models as dj_models
from django.db.models.expressions import RawSQL
from django.db.utils import OperationalError as DjangoOperationalError

from .. import _moves
from .._clock import Clock, SystemClock
from .._graph import State, StateGraph
from ..errors import ConfigError, TransitionConflict, TransitionError
from . import _wake_sender
from ._apply_move import history_expression, stale
from ._dialects import dialect_for
from ._django import wake_key


def perform(obj: Any, to: State | str, clock: Clock | None) -> None:
    model = type(obj)
    graph: type[StateGraph] = _graph(model)
    target = graph.get_state(to)
    if obj.state not in graph.states:
        raise TransitionError(f"{model.__name__} row is in unknown state {obj.state!r}")
    move = _moves.along_edge(graph, obj.state, target, (clock or SystemClock()).now())
    alias = obj._state.db or "default"
    rows = model._base_manager.using(alias).filter(pk=obj.pk)
    if _move(rows, move) != 1:
        raise TransitionConflict(
            f"{model.__name__} {obj.pk!r} is no longer in state {move.sources[0]}: "
            "someone else moved it first"
        )
    for key, value in move.values.items():
        setattr(obj, key, value)
    if _has_history(model):
        obj.state_history = [*(obj.state_history or []), list(move.history_entry)]


def perform_many(queryset: Any, to: State | str, clock: Clock | None) -> int:
    graph = _graph(queryset.model)
    return _move(queryset, _moves.into(graph, to, (clock or SystemClock()).now()))


def _graph(model: Any) -> type[StateGraph]:
    graph = getattr(model, "state_graph", None)
    if not (isinstance(graph, type) and issubclass(graph, StateGraph)):
        raise ConfigError(f"{model.__name__} has no state_graph")
    return graph


def _has_history(model: Any) -> bool:
    return any(f.name == "state_history" for f in model._meta.concrete_fields)


def _move(rows: Any, move: _moves.Move) -> int:
    alias = rows.db
    model = rows.model
    table = model._meta.db_table
    conn = connections[alias]
    dialect = dialect_for(conn.vendor)
    values: dict[str, Any] = move.values
    if _has_history(model):
        field = model._meta.get_field("state_history")
        append = history_expression(dialect, table, field.db_type(conn), "CAST(%s AS text)")
        values["state_history"] = RawSQL(
            append, move.history_entry, output_field=dj_models.JSONField()
        )
    try:
        moved = int(rows.filter(state__in=list(move.sources)).update(**values))
    except DjangoOperationalError as exc:
        if dialect.stale_snapshot(str(exc)):
            raise stale(table) from exc
        raise
    if moved:
        with conn.cursor() as cursor:
            _wake_sender.notify_cursor(cursor, dialect, table)
        _wake_sender.wake_on_commit(
            lambda callback: transaction.on_commit(callback, using=alias), wake_key(alias))
    return moved
