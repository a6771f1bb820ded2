"""Transitions made by application code, in the application's own session: the one move
(``stator._moves``, applied by ``_apply_move``) on a SQLAlchemy model."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, inspect
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from .. import _local_wakeups, _moves
from .._graph import State, StateGraph
from ..errors import ConfigError, TransitionConflict, TransitionError
from . import _wake_sender
from ._apply_move import PlainTable, apply
from ._dialects import dialect_for


def perform(session: Session, obj: Any, to: State | str, now: datetime) -> None:
    model = type(obj)
    graph: type[StateGraph] = model.state_graph
    target = graph.get_state(to)
    if obj.state not in graph.states:
        raise TransitionError(f"{model.__name__} row is in unknown state {obj.state!r}")
    move = _moves.along_edge(graph, obj.state, target, now)
    mapper = inspect(model)
    pk_col = mapper.local_table.primary_key.columns.values()[0]
    pk_value = mapper.primary_key_from_instance(obj)[0]
    if _move(session, model, move, [pk_col == pk_value]) != 1:
        raise TransitionConflict(
            f"{model.__name__} {pk_value!r} is no longer in state {move.sources[0]}: "
            "someone else moved it first"
        )
    for key, value in move.values.items():
        set_committed_value(obj, key, value)
    if "state_history" in mapper.columns:
        session.expire(obj, ["state_history"])


def perform_many(
    session: Session, model: type, to: State | str, where: Iterable[ColumnElement[bool]],
    now: datetime,
) -> int:
    graph: type[StateGraph] = getattr(model, "state_graph", None)  # type: ignore[assignment]
    if graph is None:
        raise ConfigError(f"{model.__name__} has no state_graph")
    return _move(session, model, _moves.into(graph, to, now), list(where))


def _move(
    session: Session, model: Any, move: _moves.Move, where: list[ColumnElement[bool]]
) -> int:
    mapper = inspect(model)
    conn = session.connection(bind_arguments={"mapper": mapper})
    moved = apply(conn, dialect_for(conn.dialect.name),
                  PlainTable.of(mapper.local_table, conn.dialect), move, where)
    if moved:
        _wake_sender.wake_on_session_commit(session, _local_wakeups.key_for(conn.engine.url))
    return moved
