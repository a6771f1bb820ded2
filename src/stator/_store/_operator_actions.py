"""The operator's row and model actions (the dashboard's buttons, the Django admin's actions).

Every action is one transaction that also writes ``stator_actions`` (who, when, what) and
wakes the workers.  Row actions are fenced like the engine's own writes: they apply only if
the row is still in the state, with the ``state_next``, the operator saw.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Connection, delete, false, insert, select, update
from sqlalchemy.exc import DBAPIError

from .. import _moves
from ..errors import TransitionConflict, TransitionError
from . import _schema, _wake_sender
from ._apply_move import apply
from ._dialects import BEGIN_OPTION
from ._tracked import TrackedModel
from ._unreadable import first_line, is_unreadable, is_unwritable

if TYPE_CHECKING:
    from .interface import Driver as Store


def retry_now(
    store: Store, t: TrackedModel, pk: Any, seen_state: str, seen_next: datetime | None,
    now: datetime, actor: str,
) -> None:
    """Make one row due now; ``TransitionConflict`` if it moved since it was shown."""
    _moves.retryable(t.graph, seen_state)
    table = t.table
    with _writing(store) as conn:
        done = conn.execute(
            update(table).where(*_fence(conn, store, t, pk, seen_state, seen_next))
            .values(state_next=now)
        ).rowcount
        if done != 1:
            raise TransitionConflict(f"{t.name} {pk!r} changed since it was shown; reload")
        _log(conn, now, actor, "retry", t.name, pk, f"{seen_state}: due now", 1)
        _wake_sender.notify(conn, store.dialect, t.table.name)
    _wake_sender.wake(store.wake_key)


def move_row(
    store: Store, t: TrackedModel, pk: Any, seen_state: str, seen_next: datetime | None,
    to: str, now: datetime, actor: str,
) -> None:
    """Move one row along an edge of its graph (``TransitionError`` if there is none)."""
    move = _moves.along_edge(t.graph, seen_state, to, now)
    try:
        with _writing(store) as conn:
            done = apply(conn, store.dialect, t, move,
                         _fence(conn, store, t, pk, seen_state, seen_next))
            if done != 1:
                raise TransitionConflict(f"{t.name} {pk!r} changed since it was shown; reload")
            _log(conn, now, actor, "move", t.name, pk, f"{seen_state} -> {to}", 1)
    except DBAPIError as exc:
        if not is_unwritable(exc):
            raise
        raise TransitionError(
            f"the database refuses {t.name} {pk!r}'s move ({first_line(exc)}): fix the row's "
            "values (its state_history, say) first") from None
    _wake_sender.wake(store.wake_key)


def retry_failing(store: Store, t: TrackedModel, state: str, now: datetime, actor: str) -> int:
    """Make every failing row of ``state`` (waiting out a backoff) due now; how many."""
    _moves.retryable(t.graph, state)
    table = t.table
    with _writing(store) as conn:
        done = int(conn.execute(
            update(table).where(
                table.c.state == state, table.c.state_next.is_not(None),
                table.c.state_next > now, table.c.state_attempts > 0,
            ).values(state_next=now)
        ).rowcount)
        _log(conn, now, actor, "retry_failing", t.name, None, f"{state}: failing rows due now",
             done)
        if done:
            _wake_sender.notify(conn, store.dialect, t.table.name)
    _wake_sender.wake(store.wake_key)
    return done


def set_paused(store: Store, model: str, paused: bool, now: datetime, actor: str) -> bool:
    """Pause or resume a model; False if it already was so."""
    p = _schema.paused_table
    with _writing(store) as conn:
        exists = conn.execute(select(p.c.model).where(p.c.model == model)).first() is not None
        if exists == paused:
            return False
        if paused:
            conn.execute(insert(p).values(model=model, paused_at=now, paused_by=actor))
        else:
            conn.execute(delete(p).where(p.c.model == model))
        _log(conn, now, actor, "pause" if paused else "resume", model, None,
             "claims stopped" if paused else "claims resumed", 0)
        tracked = next((t for t in store.tracked if t.name == model), None)
        if not paused and tracked is not None:
            _wake_sender.notify(conn, store.dialect, tracked.table.name)
    _wake_sender.wake(store.wake_key)
    return True


def record_action(
    store: Store, now: datetime, actor: str, action: str, model: str, pk: Any, detail: str,
    affected: int,
) -> None:
    """Log an action taken outside these operations (the Django admin's "run again") in
    ``stator_actions``, in the caller's transaction if it has one (a Django atomic block)."""
    with _writing(store) as conn:
        _log(conn, now, actor, action, model, pk, detail, affected)


def _fence(
    conn: Connection, store: Store, t: TrackedModel, pk: Any, seen_state: str,
    seen_next: datetime | None,
) -> list[ColumnElement[bool]]:
    """The engine's fence: the row is still in ``seen_state`` with ``seen_next``."""
    table = t.table
    this = table.c[t.pk] == pk
    if seen_next is None:
        return [this, table.c.state == seen_state, table.c.state_next.is_(None)]
    if not store.dialect.times_as_text:
        return [this, table.c.state == seen_state, table.c.state_next == seen_next]
    # SQLite keeps times as text, spelt differently by different writers, so the instants
    # are compared here; this transaction holds SQLite's write lock (BEGIN IMMEDIATE), so
    # nothing can change the row between this read and the update.
    try:
        found = conn.execute(select(table.c.state_next).where(this)).scalar()
    except Exception as exc:  # garbage written since it was shown: not what was seen
        if not is_unreadable(exc):
            raise
        return [false()]
    if found != seen_next:
        return [false()]
    return [this, table.c.state == seen_state]


@contextmanager
def _writing(store: Store) -> Iterator[Connection]:
    """A write transaction (``BEGIN IMMEDIATE`` on SQLite), as the engine's writes."""
    with store.engine.connect().execution_options(**{BEGIN_OPTION: "immediate"}) as conn, \
            conn.begin():
        yield conn


def _log(
    conn: Connection, now: datetime, actor: str, action: str, model: str, pk: Any, detail: str,
    affected: int,
) -> None:
    conn.execute(insert(_schema.actions_table).values(
        created_at=now, actor=actor[:255], action=action, model=model,
        row_pk=None if pk is None else str(pk), detail=detail, affected=affected,
    ))
