"""The one narrow interface between the engine and the database.

Named operations only: claim, write back, find the next due time, record heartbeats,
stats and errors, report status, migrate and check the schema.  SQL lives here and in
``_tracked.py``; the SQLite and PostgreSQL paths differ only by ``SqlDialect``.

Two integrations share all of it.  ``DjangoStore`` (``_django.py``) runs these same statements
through Django's connections; it overrides only the hooks under "what differs between
integrations" (wake-up channel, listener connection, handler transactions, per-thread
cleanup), how claimed rows become objects (``claim``), and ``migrate`` (Django creates the
tables).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    delete,
    func,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, configure_mappers
from sqlalchemy.orm.attributes import instance_state
from sqlalchemy.schema import CreateTable

from .. import _local_wakeups
from .._policy import Claimed, Write, first_due
from .._types import UTCDateTime, to_sqlite_text
from ..errors import ConfigError, SchemaError
from ..sqlalchemy import STATOR_COLUMNS
from . import _dashboard, _schema, _unreadable, _wake_sender
from ._dialects import BEGIN_OPTION, SqlDialect, dialect_for, use_wal, with_client_settings
from ._sessions import SessionScopes
from ._tracked import TrackedModel
from .interface import INLINE, DueDepth, HandlerScopes

WRITE = {BEGIN_OPTION: "immediate"}
READ = {BEGIN_OPTION: "deferred"}
SQLITE_ADDED_SENTINEL = "0001-01-01 00:00:00.000000"  # "the insert's time", see migrate
MIGRATE_HINT = "run `stator migrate APP` (or Stator.migrate())"


class Store:
    migrate_hint = MIGRATE_HINT

    def __init__(self, engine: Engine, models: Sequence[type]) -> None:
        self.engine = engine
        self.dialect: SqlDialect = dialect_for(engine)
        self.tracked = [TrackedModel.build(m, self.dialect, engine.dialect) for m in models]
        self.dialect.configure(
            engine,
            [s.timeout for t in self.tracked for s in t.graph.states.values() if s.automatic],
        )
        self._datetime = UTCDateTime()
        self._notify_limit = _wake_sender.NotifyLimit()
        self._loaders: dict[str, _Loader] = {}
        self._writer = writer_lock(self.dialect)

    @property
    def _claim_options(self) -> dict[str, Any]:
        """A claim is one statement, atomic on its own: on PostgreSQL it runs in autocommit,
        one round trip instead of three (BEGIN, the UPDATE, COMMIT), which is what a claim
        costs on a link with latency.  SQLite wants BEGIN IMMEDIATE; Django's store says
        how its lent connections do the same."""
        if self.dialect.name == "postgresql":
            return {"isolation_level": "AUTOCOMMIT"}
        return WRITE

    # The same for the write-back of a batch that is one model's plain moves (or deletes): its
    # fenced statement is atomic on its own and says which rows it refused, and the NOTIFY
    # rides inside it when one is due, so BEGIN, the statement, the NOTIFY and COMMIT become
    # one round trip.  Anything more (error rows, ``stator_write_extra``, several models,
    # moves mixed with deletes) keeps its transaction; so does Django (its connections).
    autocommit_writes = True

    # -- capability flags (see ``interface.Driver``) -----------------------------------------

    @property
    def listen_notify(self) -> bool:
        return self.dialect.listen_notify

    @property
    def skip_locked(self) -> bool:
        return bool(self.dialect.skip_locked)

    @property
    def one_statement_writes(self) -> bool:
        return self.autocommit_writes and self.dialect.one_statement_writes

    @property
    def row_by_row_writes(self) -> bool:
        return self.dialect.row_by_row_writes

    # -- what differs between integrations (see ``_django.py`` for the other one) ---------

    @property
    def wake_key(self) -> str:
        """The in-process wake-up channel of this database (see ``_wake``)."""
        return _local_wakeups.key_for(self.engine.url)

    def sqlite_path(self) -> str | None:
        return self.engine.url.database

    def listen_connection(self, listen_url: str | None = None) -> Any:
        """A connection of its own (outside the pool) for LISTEN, in autocommit mode: to
        ``listen_url`` if given (past a pooler, straight to the server), else like the
        engine's."""
        import psycopg

        url = self.engine.url if listen_url is None else make_url(listen_url)
        args, kwargs = self.engine.dialect.create_connect_args(url)
        return psycopg.connect(*args, **with_client_settings(dict(kwargs)), autocommit=True)

    def handler_scopes(self) -> HandlerScopes:
        return SessionScopes(self)

    def thread_done(self) -> None:
        """Called by each worker thread as it ends."""

    async def loop_done(self) -> None:
        """Awaited on an event loop that ran async handlers, as it ends."""

    async def after_async_error(self) -> None:
        """Awaited after an async handler raised, on the loop that ran it."""

    # -- schema ----------------------------------------------------------------------------

    def migrate(self) -> list[str]:
        """Create or upgrade Stator's tables and the tracked tables' columns; idempotent."""
        done: list[str] = []
        read_only = read_only_sqlite(self.engine)
        if read_only is not None:
            raise SchemaError(read_only)
        with self.engine.connect().execution_options(**WRITE) as conn, conn.begin():
            applied = _schema.upgrade(conn)
            if applied:
                done.append(f"stator schema upgraded to version {_schema.SCHEMA_VERSION}")
            for tracked in self.tracked:
                done.extend(self._migrate_table(conn, tracked))
        if self.dialect.name == "sqlite":
            use_wal(self.engine)
        return done

    def _migrate_table(self, conn: Connection, tracked: TrackedModel) -> list[str]:
        insp = inspect(conn)
        table = tracked.table
        if not insp.has_table(table.name):
            table.create(conn)
            return [f"created table {table.name}", *self._install_notify(conn, tracked)]
        done = []
        existing = {c["name"] for c in insp.get_columns(table.name)}
        added = [name for name in STATOR_COLUMNS if name not in existing]
        now = datetime.now(UTC)  # existing rows are treated as inserted now
        for name in added:
            conn.execute(text(self._add_column_sql(tracked, name, conn, now)))
            if self.dialect.name == "postgresql":
                # That constant default only fills the existing rows; later inserts need
                # the model's own (the database's now, not the migration's).
                conn.execute(text(self._restore_default_sql(tracked, name, conn)))
            done.append(f"added column {table.name}.{name}")
        if self.dialect.name == "sqlite" and {"state_changed", "state_next"} & set(added):
            done.extend(self._sqlite_time_defaults(conn, tracked))
        indexes = {ix["name"] for ix in insp.get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in indexes and all(c.name in STATOR_COLUMNS for c in index.columns):
                index.create(conn)
                done.append(f"created index {index.name}")
        return done + self._install_notify(conn, tracked)

    def _add_column_sql(
        self, tracked: TrackedModel, name: str, conn: Connection, now: datetime
    ) -> str:
        column = tracked.table.c[name]
        sqltype = column.type.compile(conn.dialect)
        initial = tracked.graph.initial_state
        due = first_due(initial, now)
        # Existing rows enter the initial state now, as if inserted now.  SQLite only
        # accepts constant defaults when adding a column: there the constant is a sentinel
        # that an insert trigger replaces with the insert's own time (_sqlite_time_defaults).
        changed: str | None = SQLITE_ADDED_SENTINEL
        scheduled: str | None = SQLITE_ADDED_SENTINEL
        if self.dialect.name != "sqlite":
            changed, scheduled = self.dialect.ts_json(now), self.dialect.ts_json(due)
        default = {
            "state": f"'{initial.name}'",
            "state_changed": f"'{changed}'",
            "state_next": "NULL" if due is None else f"'{scheduled}'",
            "state_attempts": "0",
        }[name]
        null = "NULL" if column.nullable else "NOT NULL"
        table = tracked.quoted_table
        return f"ALTER TABLE {table} ADD COLUMN {name} {sqltype} {null} DEFAULT {default}"

    def _sqlite_time_defaults(self, conn: Connection, tracked: TrackedModel) -> list[str]:
        """Give rows inserted later the model's time defaults, which SQLite cannot set on a
        column it adds: existing rows get the migration's time, new rows their own."""
        table, pk = tracked.quoted_table, tracked.quoted_pk
        changed = _default_sql(tracked.table.c.state_changed, conn)
        scheduled = _default_sql(tracked.table.c.state_next, conn)
        sentinel = f"'{SQLITE_ADDED_SENTINEL}'"
        conn.execute(text(
            f"UPDATE {table} SET state_changed = {changed}, state_next = CASE WHEN "
            f"state_next = {sentinel} THEN {scheduled} ELSE state_next END "
            f"WHERE state_changed = {sentinel}"
        ))
        trigger = conn.dialect.identifier_preparer.quote(f"stator_defaults_{tracked.table.name}")
        conn.execute(text(
            f"CREATE TRIGGER IF NOT EXISTS {trigger} AFTER INSERT ON {table} FOR EACH ROW "
            f"WHEN NEW.state_changed = {sentinel} OR NEW.state_next = {sentinel} BEGIN "
            f"UPDATE {table} SET "
            f"state_changed = CASE WHEN NEW.state_changed = {sentinel} THEN {changed} "
            f"ELSE NEW.state_changed END, "
            f"state_next = CASE WHEN NEW.state_next = {sentinel} THEN {scheduled} "
            f"ELSE NEW.state_next END WHERE {pk} = NEW.{pk}; END"
        ))
        return [f"installed time-default trigger {trigger}"]

    def _restore_default_sql(self, tracked: TrackedModel, name: str, conn: Connection) -> str:
        column = tracked.table.c[name]
        ddl = conn.dialect.ddl_compiler(conn.dialect, CreateTable(tracked.table))
        default = ddl.get_column_default_string(column)
        action = "DROP DEFAULT" if default is None else f"SET DEFAULT {default}"
        return f"ALTER TABLE {tracked.quoted_table} ALTER COLUMN {name} {action}"

    def _install_notify(self, conn: Connection, tracked: TrackedModel) -> list[str]:
        if self.dialect.name != "postgresql":
            return []
        conn.execute(text(
            "CREATE OR REPLACE FUNCTION stator_notify() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_notify('stator', TG_TABLE_NAME); RETURN NULL; END $$"
        ))
        trigger = f"stator_notify_{tracked.table.name}"
        exists = conn.execute(
            text("SELECT 1 FROM pg_trigger WHERE tgname = :name AND NOT tgisinternal "
                 "AND tgrelid = CAST(:table AS regclass)"),
            {"name": trigger, "table": tracked.quoted_table},  # regclass parses the quoting
        ).first()
        if exists:
            return []
        conn.execute(text(
            f"CREATE TRIGGER {conn.dialect.identifier_preparer.quote(trigger)} AFTER INSERT "
            f"ON {tracked.quoted_table} FOR EACH STATEMENT EXECUTE FUNCTION stator_notify()"
        ))
        return [f"installed wake-up trigger on {tracked.table.name}"]

    def problems(self) -> list[str]:
        """Why this database is not ready to be run, each with its fix; empty when ready."""
        nowhere = missing_sqlite_file(self.engine)
        if nowhere is not None:  # connecting would create an empty file there
            return [f"no database at {nowhere}; run `stator migrate APP` first"]
        read_only = read_only_sqlite(self.engine)
        if read_only is not None:
            return [read_only]
        with self.engine.connect() as conn:
            version = _schema.current_version(conn)
            if version is None:
                return [f"the database has no Stator tables: {self.migrate_hint}"]
            if version > _schema.SCHEMA_VERSION:
                return [
                    f"the database's Stator schema is version {version}, newer than this "
                    f"Stator ({_schema.SCHEMA_VERSION}): upgrade the stator-engine package"
                ]
            found = []
            if version < _schema.SCHEMA_VERSION:
                found.append(f"the Stator schema is version {version}: {self.migrate_hint}")
            insp = inspect(conn)
            for tracked in self.tracked:
                name = tracked.table.name
                if not insp.has_table(name):
                    found.append(f"table {name} does not exist: {self.migrate_hint}")
                    continue
                columns = {c["name"] for c in insp.get_columns(name)}
                missing = [c for c in STATOR_COLUMNS if c not in columns]
                if missing:
                    lacking = ", ".join(missing)
                    found.append(
                        f"table {name} lacks Stator column(s) {lacking}: {self.migrate_hint}"
                    )
            return found

    def check_ready(self) -> None:
        found = self.problems()
        if found:
            raise SchemaError("; ".join(found))

    # -- the hot path ----------------------------------------------------------------------

    def claim(
        self, tracked: TrackedModel, now: datetime, limit: int
    ) -> list[tuple[Any, Claimed]]:
        """Lease up to ``limit`` due rows; returns (ORM object, claim) pairs, objects detached.
        Rows that cannot be read are recorded as errors and set aside (``_unreadable``)."""
        sql = tracked.sql.claim
        if sql is None or limit <= 0:
            return []
        params = self._claim_params(tracked, now, limit)
        return _unreadable.claim_setting_aside(
            self, tracked, now, params, lambda: self._claim_rows(tracked, sql, params)
        )

    def _loader(self, tracked: TrackedModel) -> _Loader:
        loader = self._loaders.get(tracked.name)
        if loader is None:
            loader = self._loaders[tracked.name] = _Loader(tracked, tracked.sql.claim or "")
        return loader

    def load_one(self, conn: Connection, tracked: TrackedModel, key: Any) -> tuple[Any, Claimed]:
        """Row ``key`` loaded as a claim loads it (raises what the claim would raise)."""
        loader = self._loader(tracked)
        return loader.load(conn.execute(loader.one, {"pk": key}).one())

    def _claim_rows(
        self, tracked: TrackedModel, sql: str, params: dict[str, Any]
    ) -> list[tuple[Any, Claimed]]:
        loader = self._loader(tracked)
        if not loader.fast:
            return self._claim_orm(tracked, sql, params)
        with self._writer, self.engine.connect().execution_options(**self._claim_options) \
                as conn, conn.begin():
            rows = conn.execute(loader.statement, params).all()
        return [loader.load(row) for row in rows]

    def _claim_orm(
        self, tracked: TrackedModel, sql: str, params: dict[str, Any]
    ) -> list[tuple[Any, Claimed]]:
        """The ORM's own loading, for models whose load events must run (a reconstructor)."""
        statement = select(tracked.model).from_statement(text(sql).columns(*tracked.table.c))
        with Session(self.engine, expire_on_commit=False, autoflush=False) as session:
            session.connection(execution_options=WRITE)
            objects = list(session.scalars(statement, params))
            session.commit()
            session.expunge_all()
        return [(obj, _claimed(obj, tracked)) for obj in objects]

    def _claim_params(self, tracked: TrackedModel, now: datetime, limit: int) -> dict[str, Any]:
        params: dict[str, Any] = {"now": self.dialect.ts(now), "limit": limit}
        for i, state in enumerate(tracked.graph.scheduled_states()):
            params[f"lease_{i}"] = self.dialect.ts(now + timedelta(seconds=state.lease))
        return params

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
        except DBAPIError as exc:
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
        params = self.dialect.batch_params([self._payload(w, history) for w in writes])
        sql = tracked.sql.delete if delete else tracked.sql.write
        notify = tracked.sql.write_notify
        if not delete and notify and any(w.moved for w in writes) and self._notify_due(tracked):
            sql = notify
            params["table"] = tracked.table.name
        with self._writer, self.engine.connect().execution_options(
                isolation_level="AUTOCOMMIT") as conn, conn.begin():
            # The notification's row carries no key (NULL): primary keys never are.
            applied = {pk for pk in conn.execute(text(sql), params).scalars() if pk is not None}
        return {w.pk for w in writes} - applied

    def _write(
        self, conn: Connection, tracked: TrackedModel, writes: Sequence[Write], worker_id: str
    ) -> set[Any]:
        updates = [w for w in writes if not w.delete]
        deletes = [w for w in writes if w.delete]
        applied: set[Any] = set()
        if updates:
            raw = self.sqlite_connection(conn)
            if raw is not None and tracked.sql.write_row is not None:
                applied.update(self._write_rows(raw, tracked, updates))
            else:
                history = tracked.history_type is not None
                params = self.dialect.batch_params([self._payload(w, history) for w in updates])
                applied.update(conn.execute(text(tracked.sql.write), params).scalars())
        if deletes:
            params = self.dialect.batch_params([self._payload(w) for w in deletes])
            applied.update(conn.execute(text(tracked.sql.delete), params).scalars())
        extras = [w for w in updates if w.extra is not None and w.pk in applied]
        if extras:
            if tracked.write_extra is None:
                raise ConfigError(f"model {tracked.name} has no stator_write_extra")
            tracked.write_extra(self, conn, extras)
        failures = [w for w in writes if w.failure is not None and w.pk in applied]
        if failures:
            self._record_errors(conn, tracked, failures, worker_id)
        if any(w.moved for w in updates):
            self._notify_moves(conn, tracked)
        return {w.pk for w in writes} - applied

    def sqlite_connection(self, conn: Connection) -> sqlite3.Connection | None:
        """The sqlite3 connection under ``conn``, for statements run row by row (see
        ``_write_rows``); None on other databases."""
        raw = conn.connection.dbapi_connection
        return raw if isinstance(raw, sqlite3.Connection) else None

    def _write_rows(
        self, raw: sqlite3.Connection, tracked: TrackedModel, writes: Sequence[Write]
    ) -> list[Any]:
        """SQLite: the fenced UPDATE once per row on the DBAPI connection, inside the caller's
        transaction; the primary keys whose fence held.

        SQLite runs in this process, so a statement per row costs no round trip, while the
        one-statement form (a JSON array, unpacked by ``json_each`` and nine ``->>`` per
        row) cost more CPU than the rows' own updates, in Python and in SQLite alike.
        ``executemany`` would be cheaper still but cannot say which rows it changed.
        """
        ts = to_sqlite_text
        history = tracked.history_type is not None
        cursor = raw.cursor()
        sql = tracked.sql.write_row
        assert sql is not None
        applied = []
        try:
            for w in writes:
                changed, after = w.state_changed, w.state_next
                values: tuple[Any, ...] = (
                    w.state, None if changed is None else ts(changed),
                    None if after is None else ts(after), w.attempts, w.pk, w.fence_state,
                    ts(w.fence),
                )
                if history:
                    iso = None if changed is None else changed.isoformat()
                    values = (*values, w.moved, iso)
                # Numbered placeholders (?1…) are named ones to sqlite3: bind by name.
                cursor.execute(sql, {str(i): v for i, v in enumerate(values, 1)})
                if cursor.rowcount == 1:
                    applied.append(w.pk)
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
    def _payload(self, w: Write, history: bool = True) -> dict[str, Any]:
        """One write as a record of the statement's batch.  ``history``: the table keeps
        ``state_history`` (only then is ``changed_iso`` read; formatting it for nothing
        cost a tenth of the write's Python time)."""
        ts = self.dialect.ts_json
        changed = w.state_changed
        return {
            "pk": w.pk, "fence_state": w.fence_state, "fence": ts(w.fence), "state": w.state,
            "changed": ts(changed), "next": ts(w.state_next), "attempts": w.attempts,
            "moved": w.moved,
            "changed_iso": changed.isoformat() if history and changed else None,
        }

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
            now = datetime.now(UTC)
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
                    due = _unreadable.readable_time(self, value, conn.dialect, now)
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
                first = _unreadable.readable_time(self, oldest, conn.dialect, now)
                out[t.name] = DueDepth(
                    int(count), (now - first).total_seconds() if first else 0.0
                )
            conn.rollback()
        return out

    # -- workers, stats and errors ---------------------------------------------------------

    def heartbeat(
        self, worker_id: str, started: datetime, now: datetime, concurrency: int,
        models: list[str], threads: dict[str, str], pid: int,
    ) -> None:
        row = {
            "hostname": socket.gethostname(), "pid": pid, "started_at": started,
            "last_seen": now, "concurrency": concurrency, "models": ",".join(models),
            "threads": json.dumps(threads),
        }
        table = _schema.workers_table
        with self.engine.connect().execution_options(**WRITE) as conn, conn.begin():
            updated = conn.execute(
                table.update().where(table.c.id == worker_id).values(**row)
            ).rowcount
            if not updated:
                conn.execute(insert(table).values(id=worker_id, **row))

    def forget_worker(self, worker_id: str) -> None:
        table = _schema.workers_table
        with self.engine.connect().execution_options(**WRITE) as conn, conn.begin():
            conn.execute(delete(table).where(table.c.id == worker_id))

    def record_stats(
        self, rows: list[dict[str, Any]], prune_before: datetime,
        edges: Sequence[dict[str, Any]] = (),
    ) -> None:
        """One stats period per model, and its transitions per edge (``edges``)."""
        with self.engine.connect().execution_options(**WRITE) as conn, conn.begin():
            if rows:
                conn.execute(insert(_schema.stats_table), rows)
            if edges:
                conn.execute(insert(_schema.edge_stats_table), list(edges))
            edge_stats = _schema.edge_stats_table
            conn.execute(delete(edge_stats).where(edge_stats.c.period_end < prune_before))
            stats, errors, workers = (
                _schema.stats_table, _schema.errors_table, _schema.workers_table
            )
            conn.execute(delete(stats).where(stats.c.period_end < prune_before))
            conn.execute(delete(errors).where(errors.c.created_at < prune_before))
            conn.execute(delete(workers).where(workers.c.last_seen < prune_before))

    # -- status ----------------------------------------------------------------------------

    def state_counts(self, now: datetime) -> list[dict[str, Any]]:
        """Per model and state: rows, due now, oldest due time, rows failing (counted in
        ``_dashboard``, shared with the dashboard and its metrics)."""
        return _dashboard.state_counts(self, now)

    def recent_stats(self, since: datetime) -> list[dict[str, Any]]:
        s = _schema.stats_table
        query = (
            select(
                s.c.model, func.sum(s.c.processed), func.sum(s.c.transitions),
                func.sum(s.c.errors), func.sum(s.c.timeouts), func.sum(s.c.lost),
                func.max(s.c.lag_seconds),
            )
            .where(s.c.period_end >= since)
            .group_by(s.c.model)
        )
        with self.engine.connect() as conn:
            return [
                {"model": m, "processed": int(p or 0), "transitions": int(tr or 0),
                 "errors": int(e or 0), "timeouts": int(to or 0), "lost": int(lo or 0),
                 "max_lag": float(lag or 0)}
                for m, p, tr, e, to, lo, lag in conn.execute(query)
            ]

    def recent_errors(
        self, limit: int = 20, models: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """The newest errors, of ``models`` only if given (another app may share the
        database and Stator's tables)."""
        e = _schema.errors_table
        query = select(e).order_by(e.c.id.desc()).limit(limit)
        if models is not None:
            query = query.where(e.c.model.in_(list(models)))
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def workers(self, models: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Workers that run any of ``models`` (all workers if not given)."""
        w = _schema.workers_table
        with self.engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(select(w).order_by(w.c.started_at))]
        if models is None:
            return rows
        wanted = set(models)
        return [r for r in rows if wanted & set(r["models"].split(","))]


def writer_lock(dialect: SqlDialect) -> AbstractContextManager[Any]:
    """SQLite: the engine's own write transactions (claims, batched writes) take turns in
    this process before asking SQLite for its lock.  Left to SQLite, the loser of a race
    between the claiming and the writing thread sleeps in SQLite's busy handler (1 ms, then
    2, 5, 10…) though the lock is free again within a millisecond: most of the time SQLite
    runs spent asleep.  Other processes and handler sessions still meet the busy timeout."""
    return threading.Lock() if dialect.single_writer else contextlib.nullcontext()


def missing_sqlite_file(engine: Engine) -> Path | None:
    """The path of a SQLite database file that does not exist (yet), else None."""
    url = engine.url
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    if str(url.query.get("uri", "")).lower() in ("true", "1") or url.database.startswith("file:"):
        return None  # a URI names its file its own way; leave it to SQLite
    path = Path(url.database)
    return None if path.exists() else path


def read_only_sqlite(engine: Engine) -> str | None:
    """Why a SQLite database file cannot be used, if it lies on a read-only filesystem.

    SQLite would only say "unable to open database file" (it cannot create the WAL's files
    beside it), which sends one looking for a wrong path.  A file that is merely not writable
    by this user is SQLite's to report ("readonly database")."""
    url = engine.url
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    if str(url.query.get("uri", "")).lower() in ("true", "1") or url.database.startswith("file:"):
        return None  # a URI may ask for read-only on purpose (mode=ro, immutable)
    path = Path(url.database)
    for place in (path, path.parent):
        try:
            flags = os.statvfs(place).f_flag
        except OSError:
            continue
        if flags & os.ST_RDONLY:
            return (
                f"the SQLite database {path} is on a read-only filesystem: Stator writes to it "
                f"and SQLite needs to create {path.name}-wal and {path.name}-shm beside it; "
                "remount it read-write or copy the database to a writable place"
            )
    return None


def _default_sql(column: Any, conn: Connection) -> str:
    default = column.server_default
    if default is None:
        return "NULL"
    return str(default.arg.compile(dialect=conn.dialect))


class _Loader:
    """Turns claimed rows into detached ORM objects without the ORM's loading machinery.

    Loading 100 rows through ``select(model).from_statement`` (identity map, a session, then
    ``expunge_all``) cost about a third of the worker's claim time; a claimed row is
    only ever handed to one handler, so none of that bookkeeping buys anything here.  The
    object is built as the ORM builds a loaded one: ``__new__`` plus instance state, the
    column values put straight into its ``__dict__`` (no change events), then marked as
    persistent-but-detached by its identity key, exactly what the handler's session
    expects to ``add``.  Models with load listeners (a
    ``@reconstructor``) go through the ORM instead, so their hooks still run.
    """

    def __init__(self, tracked: TrackedModel, sql: str) -> None:
        configure_mappers()  # the attribute machinery the objects need must exist
        mapper: Any = inspect(tracked.model)
        self.manager = mapper.class_manager
        self.fast = not self.manager.dispatch.load and not self.manager.dispatch.refresh
        self.statement = text(sql).columns(*tracked.table.c)
        self.one = text(
            f"SELECT {', '.join(tracked.quoted_columns)} FROM {tracked.quoted_table} "
            f"WHERE {tracked.quoted_pk} = :pk"
        ).columns(*tracked.table.c)
        self.mapper = mapper
        names = list(tracked.table.c.keys())
        self.keys = [mapper.get_property_by_column(c).key for c in tracked.table.c]
        self.pk, self.state = names.index(tracked.pk), names.index("state")
        self.changed, self.lease = names.index("state_changed"), names.index("state_next")
        self.attempts = names.index("state_attempts")

    def load(self, row: Sequence[Any]) -> tuple[Any, Claimed]:
        obj = self.manager.new_instance()
        obj.__dict__.update(zip(self.keys, row, strict=True))
        # What ``make_transient_to_detached`` does to a fresh object, without its general
        # case (reading the key back through the attribute machinery, clearing a history
        # that a fresh object does not have): an identity key makes it detached.
        instance_state(obj).key = self.mapper.identity_key_from_primary_key([row[self.pk]])
        return obj, Claimed(
            pk=row[self.pk], state=row[self.state], state_changed=row[self.changed],
            lease_until=row[self.lease], attempts=_attempts(row[self.attempts]),
        )


def _claimed(obj: Any, tracked: TrackedModel) -> Claimed:
    return Claimed(
        pk=getattr(obj, tracked.pk_attr), state=obj.state, state_changed=obj.state_changed,
        lease_until=obj.state_next, attempts=_attempts(obj.state_attempts),
    )


def _attempts(value: Any) -> int:
    """``state_attempts`` as read (SQLite keeps whatever text was written there)."""
    if type(value) is not int:
        raise ValueError(f"state_attempts holds {value!r}, not a number")
    return value
