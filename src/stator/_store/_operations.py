"""The SQL operations both drivers share: claims run, fenced writes, due times.

``SqlOperations`` is one object per driver, built by the driver and held by it (never
subclassed): it runs the statements of ``_statements.py`` through the driver's SQLAlchemy
engine.  What differs between drivers reaches it as data (how a claim's connection begins,
whether plain batches may run in autocommit) or through the driver itself (how a claimed row
becomes an object, the sqlite3 connection under a lent one, the hooks' ``store``).
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy import Connection, Engine, TextClause, insert, text
from sqlalchemy.exc import DBAPIError

from .._clock import Clock
from .._db_errors import database_errors
from .._limits import next_cursor
from .._policy import Write
from .._time_text import TimeTexts, to_sqlite_text
from ..errors import ConfigError
from . import _schema, _unreadable, _wake_sender, _write_columns
from ._dialects import BEGIN_OPTION, SqlDialect
from ._raw_claim import RawClaim
from ._tracked import TrackedModel
from .interface import INLINE, Driver, DueDepth

WRITE = {BEGIN_OPTION: "immediate"}
READ = {BEGIN_OPTION: "deferred"}


class SqlOperations:
    """The shared part of a driver (see the module docstring); final."""

    def __init__(
        self, driver: Driver, engine: Engine, dialect: SqlDialect, tracked: list[TrackedModel],
        *, claim_options: dict[str, Any], autocommit_writes: bool, clock: Clock,
    ) -> None:
        """``claim_options``: the execution options a claim's connection runs with (see each
        driver).  ``autocommit_writes``: a batch of one model's plain moves (or deletes) may
        be written as one autocommit statement (``one_statement_writes``), where the
        dialect allows it and the driver owns its connections."""
        self.driver: Final = driver
        self.clock: Final = clock  # the time of what no caller dates (a row set aside)
        self.engine: Final = engine
        self.dialect: Final = dialect
        self.tracked: Final = tracked
        self.claim_options: Final = claim_options
        self.one_statement_writes: Final = autocommit_writes and dialect.one_statement_writes
        self._notify_limit = _wake_sender.NotifyLimit()
        self._writer = writer_lock(dialect)
        # Per model and keyed limited state: the key its last claim served last (where the
        # next claim's window of keys starts: ``_limit_statements``).
        self._cursors: dict[tuple[str, int], Any] = {}

    def run_claim(
        self, statement: Any, params: dict[str, Any], lock: str | None = None,
        raw: RawClaim | None = None,
    ) -> Sequence[Any]:
        """A claim statement, on its own connection, as one write transaction (or one
        autocommit statement, per ``claim_options``); the rows it leased.  With ``lock``
        (``Statements.claim_lock``), always a transaction that runs ``lock`` first.  With
        ``raw``, the same statement runs on the connection's DB-API cursor
        (``_raw_claim``), its rows converted as ``statement``'s would be."""
        options = self.claim_options if lock is None else WRITE
        with self._writer, self.engine.connect().execution_options(**options) as conn, \
                conn.begin():
            if lock is not None:
                conn.execute(text(lock))
            if raw is not None:
                return raw.fetch(conn, params)
            return conn.execute(statement, params).all()

    def claim_params(self, tracked: TrackedModel, now: datetime, limit: int) -> dict[str, Any]:
        params: dict[str, Any] = {"now": self.dialect.ts(now), "limit": limit}
        for i, state in enumerate(tracked.graph.scheduled_states()):
            params[f"lease_{i}"] = self.dialect.ts(now + timedelta(seconds=state.lease))
            if state.name in tracked.limits and tracked.limits[state.name][1] is not None:
                params[f"lcur_{i}"] = self._cursors.get((tracked.name, i))
        return params

    def claimed(self, tracked: TrackedModel, rows: Sequence[Sequence[Any]]) -> None:
        """Note the keys a claim of ``tracked`` served (``rows`` in table column order), for
        where the next claim's window starts; nothing for a model without keyed limits."""
        if not tracked.limited:
            return
        columns = tracked.quoted_columns
        state_at = list(tracked.table.c.keys()).index("state")
        for i, state in enumerate(tracked.graph.scheduled_states()):
            limit = tracked.limits.get(state.name)
            if limit is None or limit[1] is None:
                continue
            at = columns.index(limit[1])
            served = [row[at] for row in rows if row[state_at] == state.name]
            place = (tracked.name, i)
            self._cursors[place] = next_cursor(self._cursors.get(place), served)

    def write(
        self, tracked: TrackedModel, writes: Sequence[Write], conn: Connection | None = None,
        worker_id: str = INLINE,
    ) -> set[Any]:
        """Apply fenced writes; returns the primary keys whose fence no longer held.
        ``worker_id`` names the writer in the failures it records."""
        if not writes:
            return set()
        if conn is not None:
            return self._write(conn, tracked, writes, worker_id)
        if self._one_statement(writes):
            return self._write_alone(tracked, writes)
        with self._writer, self.engine.connect().execution_options(**WRITE) as own, \
                own.begin():
            return self._write(own, tracked, writes, worker_id)

    def write_all(
        self, groups: Sequence[tuple[TrackedModel, Sequence[Write]]], worker_id: str = INLINE
    ) -> dict[str, set[Any]]:
        """Apply every model's writes in one transaction (on PostgreSQL, one autocommit
        statement when that is all they are: ``_one_statement``); lost primary keys per
        model."""
        present = [(t, writes) for t, writes in groups if writes]
        if not present:
            return {}
        try:
            return self._write_all(present, worker_id)
        except database_errors() as exc:
            if not _unreadable.is_unwritable(exc):
                raise
        # A row's values made the database refuse the whole batch: row by row, so that only
        # that row is set aside (``_unreadable``).
        return _unreadable.write_row_by_row(self, present, worker_id)

    def _write_all(
        self, present: Sequence[tuple[TrackedModel, Sequence[Write]]], worker_id: str
    ) -> dict[str, set[Any]]:
        if len(present) == 1 and self._one_statement(present[0][1]):
            tracked, writes = present[0]
            return {tracked.name: self._write_alone(tracked, writes)}
        with self._writer, self.engine.connect().execution_options(**WRITE) as conn, \
                conn.begin():
            return {t.name: self._write(conn, t, writes, worker_id) for t, writes in present}

    def _one_statement(self, writes: Sequence[Write]) -> bool:
        """Whether these writes (one model's) are a single statement's work: all moves or all
        deletes, none with an error row to record or ``extra`` columns to write."""
        if not self.one_statement_writes:
            return False
        kinds = {w.delete for w in writes}
        return len(kinds) == 1 and all(w.failure is None and w.extra is None for w in writes)

    def _write_alone(self, tracked: TrackedModel, writes: Sequence[Write]) -> set[Any]:
        """``writes`` (see ``_one_statement``) as one autocommit statement, the wake-up NOTIFY
        folded in when one is due; returns the primary keys whose fence no longer held."""
        delete = writes[0].delete
        history = not delete and tracked.history_type is not None
        params = self.dialect.batch_columns(self._batch(writes, history, not delete))
        sql = tracked.sql.delete if delete else tracked.sql.write
        notify = tracked.sql.write_notify
        if not delete and notify and any(w.moved for w in writes) and self._notify_due(tracked):
            sql = notify
            params["table"] = tracked.table.name
        with self._writer, self.engine.connect().execution_options(
                isolation_level="AUTOCOMMIT") as conn, conn.begin():
            # The notification's row carries no key (NULL): primary keys never are.
            applied = {pk for pk in conn.execute(_sql(sql), params).scalars() if pk is not None}
        return {w.pk for w in writes} - applied

    def _write(
        self, conn: Connection, tracked: TrackedModel, writes: Sequence[Write], worker_id: str
    ) -> set[Any]:
        updates = [w for w in writes if not w.delete]
        deletes = [w for w in writes if w.delete]
        applied: set[Any] = set()
        if updates:
            raw = self.driver.sqlite_connection(conn)
            if raw is not None and tracked.sql.write_row is not None:
                applied.update(self._write_rows(raw, tracked, updates))
            else:
                applied.update(self._write_batch(conn, tracked, updates))
        if deletes:
            params = self.dialect.batch_columns(self._batch(deletes, sets=False))
            applied.update(conn.execute(_sql(tracked.sql.delete), params).scalars())
        if not tracked.write_columns:  # else the fenced write above wrote them
            extras = [w for w in updates if w.extra is not None and w.pk in applied]
            if extras:
                if tracked.write_extra is None:
                    raise ConfigError(f"model {tracked.name} has no stator_write_extra")
                tracked.write_extra(self.driver, conn, extras)
        failures = [w for w in writes if w.failure is not None and w.pk in applied]
        if failures:
            self._record_errors(conn, tracked, failures, worker_id)
        if any(w.moved for w in updates):
            self._notify_moves(conn, tracked)
        return {w.pk for w in writes} - applied

    def _write_batch(
        self, conn: Connection, tracked: TrackedModel, updates: Sequence[Write]
    ) -> list[Any]:
        """The fenced write of a batch as one statement, or two where some of its writes
        carry values for the model's ``stator_write_columns`` and some not; the primary keys
        whose fence held."""
        history = tracked.history_type is not None
        folded = [w for w in updates if w.extra is not None] if tracked.write_columns else []
        plain = [w for w in updates if w.extra is None] if folded else updates
        applied: list[Any] = []
        if plain:
            params = self.dialect.batch_columns(self._batch(plain, history))
            applied.extend(conn.execute(_sql(tracked.sql.write), params).scalars())
        if folded:
            more = _write_columns.batch_columns(
                tracked.write_columns, folded, self.dialect.row_by_row_writes)
            params = self.dialect.batch_columns(self._batch(folded, history) | more)
            applied.extend(conn.execute(_sql(str(tracked.sql.write_extra)), params).scalars())
        return applied

    def _write_rows(
        self, raw: sqlite3.Connection, tracked: TrackedModel, writes: Sequence[Write]
    ) -> list[Any]:
        """SQLite: the fenced UPDATE once per row on the DBAPI connection, inside the caller's
        transaction; the primary keys whose fence held.  SQLite runs in this process, so a
        statement per row costs no round trip, while the one-statement form (a JSON array,
        unpacked by ``json_each`` and nine ``->>`` per row) cost more CPU than the rows' own
        updates, in Python and in SQLite alike.  ``executemany`` would be cheaper still but
        cannot say which rows it changed."""
        ts = TimeTexts(to_sqlite_text)
        history = tracked.history_type is not None
        cursor = raw.cursor()
        sql = tracked.sql.write_row
        assert sql is not None
        # A write carrying values for the model's ``stator_write_columns`` sets them too.
        sql_more = tracked.sql.write_row_extra or sql
        values_of = (_write_columns.encoders(tracked.write_columns, True)
                     if tracked.sql.write_row_extra else None)
        applied = []
        try:
            for w in writes:
                changed = w.state_changed
                head = (w.state, ts(changed), ts(w.state_next), w.attempts)
                fence = (w.pk, w.fence_state, ts(w.fence))
                more = () if values_of is None or w.extra is None else values_of(w.extra)
                if history:
                    iso = None if changed is None else changed.isoformat()
                    values = (*head, *fence, w.moved, iso, *more)
                    # Numbered placeholders (?1…) are named ones to sqlite3: bind by name.
                    cursor.execute(sql_more if more else sql,
                                   dict(zip(_ROW_NAMES, values, strict=False)))
                else:
                    # plain ``?``, in this order
                    cursor.execute(sql_more if more else sql, (*head, *more, *fence))
                if cursor.rowcount == 1:
                    applied.append(w.pk)
        except sqlite3.Error as exc:  # as SQLAlchemy's, which the writer judges (busy, full)
            raise DBAPIError.instance(sql, None, exc, sqlite3.Error) from exc
        finally:
            cursor.close()
        return applied

    def _notify_moves(self, conn: Connection, tracked: TrackedModel) -> None:
        """Tell idle workers elsewhere that rows moved (and may be due), within the rate
        limit (``_wake_sender.NotifyLimit``)."""
        if self._notify_due(tracked):
            _wake_sender.notify(conn, self.dialect, tracked.table.name)

    def _notify_due(self, tracked: TrackedModel) -> bool:
        """Whether a NOTIFY for ``tracked`` is due (see ``_notify_moves``); if so, it is
        counted as sent."""
        return self.dialect.notify_sql() is not None and self._notify_limit.due(tracked.name)

    def send_notification(self, payload: str) -> None:
        """A notification on the wake-up channel (the listener's check that they arrive)."""
        _wake_sender.notify_now(self.engine, self.dialect, payload)

    def _batch(
        self, writes: Sequence[Write], history: bool = True, sets: bool = True
    ) -> dict[str, list[Any]]:
        """The statement's batch columns (``dialect.batch_columns`` makes them parameters),
        built column by column (``_statements.WRITE_COLUMNS``), not a record per row, and only
        those the statement reads: ``sets`` false, the fence alone (a delete); ``history``
        false, no ``moved`` nor ``changed_iso`` (read only for ``state_history``).  Times go
        as the dialect batches them (``SqlDialect.batch_times``)."""
        times = self.dialect.batch_times
        columns = {
            "pk": [w.pk for w in writes],
            "fence_state": [w.fence_state for w in writes],
            "fence": times([w.fence for w in writes]),
        }
        if not sets:
            return columns
        columns["state"] = [w.state for w in writes]
        columns["changed"] = times([w.state_changed for w in writes])
        columns["next"] = times([w.state_next for w in writes])
        columns["attempts"] = [w.attempts for w in writes]
        if history:
            columns["moved"] = [w.moved for w in writes]
            columns["changed_iso"] = [
                w.state_changed.isoformat() if w.state_changed else None for w in writes]
        return columns

    def _record_errors(
        self, conn: Connection, tracked: TrackedModel, writes: list[Write], worker_id: str
    ) -> None:
        conn.execute(insert(_schema.errors_table), [
            {
                "model": tracked.name, "row_pk": str(w.pk), "state": w.fence_state,
                "attempt": w.attempt, "kind": w.failure.kind, "message": w.failure.message[:4000],
                "traceback": w.failure.traceback[-16000:],
                # When it failed: not the row's state_changed, which for a row that stays
                # is when it entered its state (maybe days ago: pruned at once, never shown).
                "created_at": w.failed_at or w.state_changed, "worker_id": worker_id,
            }
            for w in writes if w.failure is not None
        ])

    def next_due(
        self, tracked: Iterable[TrackedModel], claimable_at: datetime | None = None
    ) -> datetime | None:
        """The earliest time any row of these models needs the engine (leases included).

        With ``claimable_at``, rows due by then that another session holds locked are left
        out, as a claim at that time would pass them by (PostgreSQL): for ``until_idle``,
        such rows are not this worker's to wait for."""
        earliest: datetime | None = None
        with self.engine.connect().execution_options(**READ) as conn:
            now = self.clock.now()
            for t in tracked:
                sql = t.sql.next_due
                params: dict[str, Any] = {}
                if claimable_at is not None and t.sql.next_claimable is not None:
                    sql = t.sql.next_claimable
                    params["now"] = self.dialect.ts(claimable_at)
                if sql is None:
                    continue
                earliest_due = self.dialect.readable_time("min(due)")
                query = text(f"SELECT {earliest_due} FROM ({sql}) AS d")
                for (value,) in conn.execute(query, params):
                    due = _unreadable.readable_time(self.driver, value, conn.dialect, now)
                    if due is not None and (earliest is None or due < earliest):
                        earliest = due
            conn.rollback()
        return earliest

    def due_depth(
        self, tracked: Iterable[TrackedModel], now: datetime
    ) -> dict[str, DueDepth]:
        """Per model: rows due now and how late the oldest of them is, in seconds."""
        out: dict[str, DueDepth] = {}
        with self.engine.connect().execution_options(**READ) as conn:
            for t in tracked:
                states = [s.name for s in t.graph.scheduled_states()]
                if not states:
                    continue
                listed = ", ".join(f"'{s}'" for s in states)
                oldest_sql = self.dialect.readable_time("min(state_next)")
                count, oldest = conn.execute(text(
                    f"SELECT count(*), {oldest_sql} FROM {t.quoted_table} "
                    f"WHERE state IN ({listed}) AND state_next IS NOT NULL AND state_next <= :now"
                ), {"now": self.dialect.ts(now)}).one()
                first = _unreadable.readable_time(self.driver, oldest, conn.dialect, now)
                out[t.name] = DueDepth(
                    int(count), (now - first).total_seconds() if first else 0.0
                )
            conn.rollback()
        return out


@functools.lru_cache(maxsize=256)
def _sql(statement: str) -> TextClause:
    """A write's statement as SQLAlchemy runs it, made once per text (``text()`` parses
    the statement for its parameters on every call: a tenth of the writer thread's Python
    per batch)."""
    return text(statement)


# ``write_row``'s ?1…?9 and ``write_row_extra``'s more, bound by name.
_ROW_NAMES = tuple(str(i) for i in range(1, 100))


def writer_lock(dialect: SqlDialect) -> AbstractContextManager[Any]:
    """With one writer at a time (SQLite), the engine's own write transactions (claims,
    batched writes) take turns in this process before asking SQLite for its lock.  Left to
    SQLite, the loser of a race between the claiming and the writing thread sleeps in SQLite's
    busy handler (1 ms, then 2, 5, 10…) though the lock is free again within a millisecond:
    most of the time SQLite runs spent asleep.  Other processes and handler sessions still
    meet the busy timeout."""
    return threading.Lock() if dialect.single_writer else contextlib.nullcontext()
