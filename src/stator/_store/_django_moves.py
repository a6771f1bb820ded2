"""Transitions made by application code on Django models (``transition_perform``): the one
move (``stator._moves``) applied by the one applying part (``_apply_move.apply``) on the
Django driver's table, through Django's own connection: on the queryset's database, limited
to its rows, in the caller's transaction (Django's autocommit outside one)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connections, router, transaction
from sqlalchemy import Boolean, ColumnElement, bindparam
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.types import NullType

from .. import _moves
from .._clock import Clock, SystemClock
from .._db_errors import database_errors, driver_error, named
from .._graph import State, StateGraph
from ..errors import ConfigError, TransitionConflict, TransitionError
from . import _wake_sender
from ._apply_move import apply, stale
from ._django import DjangoStore, store_for, wake_key
from ._operations import WRITE
from ._tracked import TrackedModel


def perform(obj: Any, to: State | str, clock: Clock | None) -> None:
    model: type = type(obj)
    graph: type[StateGraph] = _graph(model)
    target = graph.get_state(to)
    if obj.state not in graph.states:
        raise TransitionError(f"{model.__name__} row is in unknown state {obj.state!r}")
    move = _moves.along_edge(graph, obj.state, target, (clock or SystemClock()).now())
    alias = obj._state.db or "default"
    store, t = store_for(alias, model)
    if _move(alias, store, t, move, t.table.c[t.pk] == obj.pk) != 1:
        raise TransitionConflict(
            f"{model.__name__} {obj.pk!r} is no longer in state {move.sources[0]}: "
            "someone else moved it first"
        )
    for key, value in move.values.items():
        setattr(obj, key, value)
    if t.history_type is not None:
        obj.state_history = [*(obj.state_history or []), list(move.history_entry)]


def perform_many(queryset: Any, to: State | str, clock: Clock | None) -> int:
    model = queryset.model
    move = _moves.into(_graph(model), to, (clock or SystemClock()).now())
    # Refused as ``QuerySet.update`` refuses them: the rows of such a query are not a set.
    queryset._not_support_combined_queries("update")
    if queryset.query.is_sliced:
        raise TypeError("Cannot update a query once a slice has been taken.")
    alias = queryset._db or router.db_for_write(model, **queryset._hints)
    store, t = store_for(alias, model)
    if not queryset.query.where:
        return _move(alias, store, t, move, None)
    inner = queryset.order_by().values("pk").query.get_compiler(using=alias)
    try:
        sql, params = inner.as_sql()
    except EmptyResultSet:
        return 0
    return _move(alias, store, t, move, _InDjangoQuery(t.table.c[t.pk], sql, tuple(params)))


def _graph(model: Any) -> type[StateGraph]:
    graph = getattr(model, "state_graph", None)
    if not (isinstance(graph, type) and issubclass(graph, StateGraph)):
        raise ConfigError(f"{model.__name__} has no state_graph")
    return graph


def _move(
    alias: str, store: DjangoStore, t: TrackedModel, move: _moves.Move,
    rows: ColumnElement[bool] | None,
) -> int:
    with (
        _as_django_errors(alias, store.dialect.stale_snapshot, t.table.name),
        store.engine.connect().execution_options(**WRITE) as conn, conn.begin(),
    ):
        moved = apply(conn, store.dialect, t, move, () if rows is None else (rows,))
    if moved:
        _wake_sender.wake_on_commit(
            lambda callback: transaction.on_commit(callback, using=alias), wake_key(alias))
    return moved


@contextmanager
def _as_django_errors(alias: str, stale_snapshot: Any, table: str) -> Iterator[None]:
    """A database error raised as Django's (what ``QuerySet.update`` raises), the atomic
    block around it marked for rollback as Django marks it; a stale snapshot, met while
    beginning or committing, is the move's conflict (``apply`` turns the UPDATE's own)."""
    with transaction.mark_for_rollback_on_error(using=alias):
        try:
            yield
        except database_errors() as exc:
            orig = driver_error(exc)
            if named(exc, ("OperationalError",)) and stale_snapshot(str(orig)):
                raise stale(table) from exc
            if not isinstance(orig, Exception):
                raise
            with connections[alias].wrap_database_errors:
                raise orig from None


class _InDjangoQuery(ColumnElement[bool]):
    """``column IN (<a query Django compiled>)``: the rows of a queryset, its own SQL and
    parameters, whatever it filters on (joins, expressions, ``extra``)."""

    type = Boolean()
    inherit_cache = False  # Django's SQL is not part of SQLAlchemy's cache key

    def __init__(self, column: ColumnElement[Any], sql: str, params: tuple[Any, ...]) -> None:
        self.column = column
        self.django_sql = sql
        self.django_params = params


# Django's placeholders: ``%s`` for a parameter, ``%%`` for a literal percent sign.
_DJANGO_FORMAT = re.compile(r"(%s|%%)")


@compiles(_InDjangoQuery)
def _compile_in_django_query(element: _InDjangoQuery, compiler: SQLCompiler, **kw: Any) -> str:
    text: Any = compiler.post_process_text  # untyped: escapes % where the paramstyle needs it
    params = iter(element.django_params)
    parts: list[str] = []
    for piece in _DJANGO_FORMAT.split(element.django_sql):
        if piece == "%s":  # already adapted by Django's fields: bound as they are
            parts.append(compiler.process(
                bindparam(None, next(params), type_=NullType(), unique=True), **kw))
        else:
            parts.append(text(piece.replace("%%", "%")))
    return f"{compiler.process(element.column, **kw)} IN ({''.join(parts)})"
