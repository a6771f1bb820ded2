"""Rows the engine cannot read: recorded as an error for that row, and set aside.

A timestamp column holding ``garbage`` (SQLite keeps times as text, and raw SQL, a
migration or another tool can write anything there), a PostgreSQL ``infinity`` or a year
past 9999 (valid to the server, out of Python's range), a ``state_attempts`` that is not a
number: the claim fails to turn such a row into an object.  That must cost the row, never
the worker and the healthy rows claimed with it.

When a claim fails that way, the rows it could have taken (and, where the claim had already
committed, the rows it did take) are read one by one.  Each one that cannot be read gets an
error row (kind ``unreadable``, naming the column and its value) and is pushed
``SET_ASIDE`` into the future with one more attempt counted, so it shows as failing in
``stator status``, on the dashboard and in the admin, and stays out of the claims until then.
The readable rows a committed claim had leased are handed back, and the claim runs again.
Once someone fixes the value, the row runs at its next try (or at once with "retry").

A row can also hold what the database refuses once the engine writes it back: PostgreSQL
accepts ``\u0000`` in a ``json`` column, then refuses it when the transition is appended to
``state_history`` (a data exception, SQLSTATE class 22), and the whole batch with it.  The
batch is then written row by row (``write_row_by_row``), and the row the database refuses is
set aside the same way, its columns untouched, so its batch-mates' results are not lost (nor
their handlers run again after their lease).

Readers of the earliest due time (the worker's sleep, ``stator status``) skip a value they
cannot read instead of failing (``readable_time``), and the pages that show rows (the
dashboard's list and row pages) show such a value as the text the database holds
(``readable_row``), so the row can be seen, and moved or retried, where it is set aside.
"""

from __future__ import annotations

import logging
import sqlite3
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, String, cast, insert, select, text
from sqlalchemy.exc import DataError, StatementError

from .._db_errors import database_errors, driver_error
from .._types import UTCDateTime
from . import _schema
from ._tracked import TrackedModel

if TYPE_CHECKING:
    from .._policy import Write
    from ._operations import SqlOperations
    from .interface import Driver

log = logging.getLogger("stator.worker")
_DATETIME = UTCDateTime()  # reads a stored time as the tracked columns' type does

SET_ASIDE = timedelta(hours=1)  # until the next try of a row that cannot be read
CLAIM_TRIES = 3  # claims in a row that may meet unreadable rows before the error is raised
WRITER = "claim"  # the worker_id of the error rows recorded here
KIND = "unreadable"

T = TypeVar("T")


def is_unreadable(exc: BaseException) -> bool:
    """A value the row's column types could not turn into Python: a conversion error, or the
    driver refusing a value on its side (psycopg's ``DataError`` carries no SQLSTATE then:
    the server never said anything was wrong)."""
    if isinstance(exc, DataError):
        return getattr(exc.orig, "sqlstate", None) is None
    if isinstance(exc, StatementError) and exc.orig is not None:
        return isinstance(exc.orig, ValueError | TypeError | OverflowError)
    return isinstance(exc, ValueError | TypeError | OverflowError)


def claim_setting_aside(
    store: SqlOperations, tracked: TrackedModel, now: datetime, params: dict[str, Any],
    claim: Callable[[], T],
) -> T:
    """``claim()``; when it meets rows it cannot read, set them aside and claim again."""
    for _ in range(CLAIM_TRIES - 1):
        try:
            return claim()
        except Exception as exc:
            if not is_unreadable(exc) or not set_aside(store, tracked, now, params):
                raise
    return claim()


@dataclass(frozen=True)
class Unreadable:
    pk: Any
    state: str
    attempt: int
    message: str
    traceback: str


def set_aside(
    store: SqlOperations, tracked: TrackedModel, now: datetime, params: dict[str, Any]
) -> int:
    """Find the rows the claim with ``params`` could not read, record and set them aside,
    and hand back the readable rows it leased; returns how many were set aside."""
    table, pk = tracked.quoted_table, tracked.quoted_pk
    until = now + SET_ASIDE
    with store._writer, store.engine.connect().execution_options(
            **{"stator_begin": "immediate"}) as conn, conn.begin():
        candidates_sql = tracked.sql.claim_candidates
        assert candidates_sql is not None  # a claim ran: the model has one
        candidates = conn.execute(text(candidates_sql), params).all()
        found = [u for key, state in candidates
                 if (u := _unreadable(store, conn, tracked, key, state, until)) is not None]
        for u in found:
            conn.execute(text(
                f"UPDATE {table} SET state_next = :until, state_attempts = :attempt "
                f"WHERE {pk} = :pk AND state = :state"
            ), {"until": store.dialect.ts(until), "attempt": u.attempt, "pk": u.pk,
                "state": u.state})
            log.error("%s %s in state %s: %s", tracked.name, u.pk, u.state, u.message,
                      extra={"action": "row_unreadable"})
        if found:
            conn.execute(insert(_schema.errors_table), [
                {"model": tracked.name, "row_pk": str(u.pk), "state": u.state,
                 "attempt": u.attempt, "kind": KIND, "message": u.message[:4000],
                 "traceback": u.traceback[-16000:], "created_at": now, "worker_id": WRITER}
                for u in found
            ])
        # A claim that committed before its rows failed to load (PostgreSQL's autocommit
        # claim) leased the readable ones too: hand them back for the next claim.
        for i, state in enumerate(s.name for s in tracked.graph.scheduled_states()):
            conn.execute(text(
                f"UPDATE {table} SET state_next = :now WHERE state = :state "
                f"AND state_next = :lease"
            ), {"now": params["now"], "state": state, "lease": params[f"lease_{i}"]})
    return len(found)


def _unreadable(
    store: SqlOperations, conn: Connection, tracked: TrackedModel, key: Any, state: str,
    until: datetime,
) -> Unreadable | None:
    """The row ``key`` as the claim would load it; None if that works."""
    try:
        store.driver.load_one(conn, tracked, key)
        return None
    except Exception as exc:
        if not is_unreadable(exc):
            raise
        failure = exc
    columns = _bad_columns(conn, tracked, key)
    raw = _raw_values(conn, tracked, key)
    attempts = raw.get("state_attempts")
    attempt = int(attempts) + 1 if attempts is not None and attempts.isdigit() else 1
    what = ": " + ", ".join(
        f"{c} holds {raw[c]!r}" if c in raw else f"{c} holds a value it cannot convert"
        for c in columns
    ) if columns else ""
    message = (
        f"Stator cannot read this row{what} ({first_line(failure)}); set aside until "
        f"{until:%Y-%m-%d %H:%M:%S} UTC: fix the value, then retry the row"
    )
    return Unreadable(
        key, state, attempt, message, "".join(traceback.format_exception(failure, chain=False))
    )


def _bad_columns(conn: Connection, tracked: TrackedModel, key: Any) -> list[str]:
    """The columns whose value in row ``key`` cannot be read as their type says."""
    table = tracked.table
    bad = []
    for column in table.c:
        try:
            value = conn.execute(select(column).where(table.c[tracked.pk] == key)).scalar()
        except Exception as exc:
            if not is_unreadable(exc):
                raise
            bad.append(column.name)
            continue
        if column.name == "state_attempts" and not isinstance(value, int):
            bad.append(column.name)
    return bad


def readable_row(conn: Connection, tracked: TrackedModel, key: Any) -> dict[str, Any] | None:
    """Row ``key`` for a page that shows it: each column as its type reads it, and one that
    cannot be read (see ``_bad_columns``) as the text the database holds; None if no row."""
    table = tracked.table
    bad = set(_bad_columns(conn, tracked, key)) - {"state_attempts"}  # read as it is
    columns = [cast(c, String).label(c.name) if c.name in bad else c for c in table.c]
    row = conn.execute(select(*columns).where(table.c[tracked.pk] == key)).first()
    return None if row is None else dict(row._mapping)


STATOR_TEXT = ("state_changed", "state_next", "state_attempts")


def _raw_values(conn: Connection, tracked: TrackedModel, key: Any) -> dict[str, str | None]:
    """Stator's own columns of row ``key`` as the database spells them (the application's
    columns are not shown: they may hold what an error log should not)."""
    table = tracked.table
    row = conn.execute(
        select(*(cast(table.c[name], String) for name in STATOR_TEXT))
        .where(table.c[tracked.pk] == key)
    ).one()
    return dict(zip(STATOR_TEXT, row, strict=True))


def first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return f"{type(orig).__name__}: {lines[0][:300]}" if lines else type(orig).__name__


def is_unwritable(exc: BaseException) -> bool:
    """The database refused a write for a value it met (a data exception), not for a lost
    connection or a conflict: PostgreSQL's SQLSTATE class 22, SQLite's JSON functions
    meeting text that is not JSON (a ``state_history`` the append cannot extend)."""
    orig = driver_error(exc)
    if orig is None:
        return False
    code = getattr(orig, "sqlstate", None)
    if isinstance(code, str):
        return code.startswith("22")
    return isinstance(orig, sqlite3.OperationalError) and "malformed JSON" in str(orig)


def write_row_by_row(
    store: SqlOperations, present: Sequence[tuple[TrackedModel, Sequence[Write]]], worker_id: str
) -> dict[str, set[Any]]:
    """``Store.write_all`` one row at a time; a row the database refuses is set aside.
    Returns the primary keys whose fence no longer held, per model."""
    lost: dict[str, set[Any]] = {}
    for tracked, writes in present:
        refused = lost.setdefault(tracked.name, set())
        for write in writes:
            try:
                refused |= store._write_all([(tracked, [write])], worker_id)[tracked.name]
            except database_errors() as exc:
                if not is_unwritable(exc):
                    raise
                if not _set_aside_refused(store, tracked, write, exc, worker_id):
                    refused.add(write.pk)
    return lost


def _set_aside_refused(
    store: SqlOperations, tracked: TrackedModel, write: Write, exc: BaseException, worker_id: str
) -> bool:
    """Set aside the row whose write the database refused (fenced like that write, nothing
    else changed) and record why; False if the fence no longer held."""
    now = store.clock.now()
    until = now + SET_ASIDE
    what = ("its deletion" if write.delete else
            f"its move to {write.state}" if write.moved else "its next try")
    message = (
        f"Stator cannot write this row's result ({what}): {first_line(exc)}; set aside until "
        f"{until:%Y-%m-%d %H:%M:%S} UTC: fix the row's values (its state_history, say), then "
        "retry the row"
    )
    table, pk = tracked.quoted_table, tracked.quoted_pk
    with store._writer, store.engine.connect().execution_options(
            **{"stator_begin": "immediate"}) as conn, conn.begin():
        attempts = conn.execute(text(
            f"UPDATE {table} SET state_next = :until, state_attempts = state_attempts + 1 "
            f"WHERE {pk} = :pk AND state = :state AND state_next = :fence "
            "RETURNING state_attempts"
        ), {"until": store.dialect.ts(until), "pk": write.pk, "state": write.fence_state,
            "fence": store.dialect.ts(write.fence)}).scalar()
        if attempts is None:
            return False
        conn.execute(insert(_schema.errors_table).values(
            model=tracked.name, row_pk=str(write.pk), state=write.fence_state,
            attempt=int(attempts), kind=KIND, message=message[:4000],
            traceback="".join(traceback.format_exception(exc, chain=False))[-16000:],
            created_at=now, worker_id=worker_id,
        ))
    log.error("%s %s in state %s: %s", tracked.name, write.pk, write.fence_state, message,
              extra={"action": "row_unwritable"})
    return True


def readable_time(
    store: Driver, value: Any, dialect: Any, now: datetime
) -> datetime | None:
    """A time read back from the database, for a reader of due times: a value that cannot be
    read counts as due now if the database compares it as due (a claim takes the row and
    replaces it with a lease), else it is skipped."""
    try:
        return _DATETIME.process_result_value(value, dialect)
    except (ValueError, TypeError, OverflowError):
        due = isinstance(value, str) and value <= store.dialect.ts(now)
        return now if due else None
