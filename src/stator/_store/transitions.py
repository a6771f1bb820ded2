"""Transitions made by application code, in the application's own session.

Each is one conditional UPDATE: a row only moves if it is still in a state that may move to
the target, so an application transition racing a worker is never a silent mix of both.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, event, inspect, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from .. import _local_wakeups
from .._graph import State, StateGraph
from .._policy import first_due
from ..errors import ConfigError, TransitionConflict, TransitionError
from ._dialects import dialect_for


def perform(session: Session, obj: Any, to: State | str, now: datetime) -> None:
    model = type(obj)
    graph: type[StateGraph] = model.state_graph
    target = graph.get_state(to)
    current = graph.states.get(obj.state)
    if current is None:
        raise TransitionError(f"{model.__name__} row is in unknown state {obj.state!r}")
    if target.name not in current.children:
        raise TransitionError(
            f"{graph.__name__}: no transition from {current.name} to {target.name}"
        )
    mapper = inspect(model)
    pk_col = mapper.local_table.primary_key.columns.values()[0]
    pk_value = mapper.primary_key_from_instance(obj)[0]
    moved = _move(session, model, target, [pk_col == pk_value], [current.name], now)
    if moved != 1:
        raise TransitionConflict(
            f"{model.__name__} {pk_value!r} is no longer in state {current.name}: "
            "someone else moved it first"
        )
    for key, value in (
        ("state", target.name), ("state_changed", now),
        ("state_next", first_due(target, now)), ("state_attempts", 0),
    ):
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
    target = graph.get_state(to)
    sources = [s.name for s in target.parents.values()]
    if not sources:
        raise TransitionError(f"{graph.__name__}: no state has a transition to {target.name}")
    return _move(session, model, target, list(where), sources, now)


def _move(
    session: Session, model: Any, target: State, where: list[ColumnElement[bool]],
    sources: list[str], now: datetime,
) -> int:
    table = inspect(model).local_table
    bind = session.get_bind()
    dialect = dialect_for(bind.dialect.name)
    values: dict[str, Any] = {
        "state": target.name, "state_changed": now,
        "state_next": first_due(target, now), "state_attempts": 0,
    }
    if "state_history" in table.c:
        history_type = table.c.state_history.type.compile(bind.dialect)
        quoted = bind.dialect.identifier_preparer.format_table(table)
        append = dialect.history_append(quoted, history_type, ":stator_to", ":stator_iso")
        values["state_history"] = text(append).bindparams(
            stator_to=target.name, stator_iso=now.isoformat()
        )
    statement = (
        update(table).where(table.c.state.in_(sources), *where).values(**values)
        .execution_options(synchronize_session=False)
    )
    try:
        moved = session.execute(statement).rowcount  # type: ignore[attr-defined]
    except OperationalError as exc:
        if dialect.name == "sqlite" and "locked" in str(exc.orig):
            # SQLite cannot upgrade a read transaction whose snapshot is out of date: someone
            # committed since this transaction first read, so it may have moved these rows.
            raise TransitionConflict(
                f"{table.name}: the database changed since this transaction began reading; "
                "roll back and try the transition in a new transaction"
            ) from exc
        raise
    if moved:
        _wake_on_commit(session, table.name, dialect.notify_sql())
    return int(moved)


def _wake_on_commit(session: Session, table: str, notify: str | None) -> None:
    if notify:
        session.execute(text(notify), {"table": table})
    key = _local_wakeups.key_for(session.get_bind().engine.url)
    if not session.info.get("stator_wake"):
        session.info["stator_wake"] = True

        def _after_commit(_session: Session) -> None:
            _session.info.pop("stator_wake", None)
            _local_wakeups.wake(key)

        event.listen(session, "after_commit", _after_commit, once=True)
