"""The one narrow interface between the engine and the database.

Named operations only: claim, write back, find the next due time, record heartbeats,
stats and errors, report status, migrate and check the schema.  SQL lives here and in
``_tracked.py``; the SQLite and PostgreSQL paths differ only by ``SqlDialect``.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
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
from sqlalchemy.orm import Session
from sqlalchemy.schema import CreateTable

from .._policy import Claimed, Write, first_due
from .._types import UTCDateTime
from ..errors import SchemaError
from ..sqlalchemy import STATOR_COLUMNS
from . import _schema
from ._dialects import BEGIN_OPTION, SqlDialect, dialect_for
from ._tracked import TrackedModel, row_key

WRITE = {BEGIN_OPTION: "immediate"}
READ = {BEGIN_OPTION: "deferred"}
NOTIFY_EVERY = 0.1  # seconds
SQLITE_ADDED_SENTINEL = "0001-01-01 00:00:00.000000"  # "the insert's time", see migrate
MIGRATE_HINT = "run `stator migrate APP` (or Stator.migrate())"


class Store:
    def __init__(self, engine: Engine, models: Sequence[type]) -> None:
        self.engine = engine
        self.dialect: SqlDialect = dialect_for(engine)
        self.dialect.configure(engine)
        self.tracked = [TrackedModel.build(m, self.dialect, engine.dialect) for m in models]
        self._datetime = UTCDateTime()
        self._notified: dict[str, float] = {}

    # -- schema ----------------------------------------------------------------------------

    def migrate(self) -> list[str]:
        """Create or upgrade Stator's tables and the tracked tables' columns; idempotent."""
        done: list[str] = []
        with self.engine.connect().execution_options(**WRITE) as conn, conn.begin():
            applied = _schema.upgrade(conn)
            if applied:
                done.append(f"stator schema upgraded to version {_schema.SCHEMA_VERSION}")
            for tracked in self.tracked:
                done.extend(self._migrate_table(conn, tracked))
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
        table = tracked.table.name
        return f"ALTER TABLE {table} ADD COLUMN {name} {sqltype} {null} DEFAULT {default}"

    def _sqlite_time_defaults(self, conn: Connection, tracked: TrackedModel) -> list[str]:
        """Give rows inserted later the model's time defaults, which SQLite cannot set on a
        column it adds: existing rows get the migration's time, new rows their own."""
        table, pk = tracked.table.name, tracked.pk
        changed = _default_sql(tracked.table.c.state_changed, conn)
        scheduled = _default_sql(tracked.table.c.state_next, conn)
        sentinel = f"'{SQLITE_ADDED_SENTINEL}'"
        conn.execute(text(
            f"UPDATE {table} SET state_changed = {changed}, state_next = CASE WHEN "
            f"state_next = {sentinel} THEN {scheduled} ELSE state_next END "
            f"WHERE state_changed = {sentinel}"
        ))
        trigger = f"stator_defaults_{table}"
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
        return f"ALTER TABLE {tracked.table.name} ALTER COLUMN {name} {action}"

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
            {"name": trigger, "table": tracked.table.name},
        ).first()
        if exists:
            return []
        conn.execute(text(
            f"CREATE TRIGGER {trigger} AFTER INSERT ON {tracked.table.name} "
            "FOR EACH STATEMENT EXECUTE FUNCTION stator_notify()"
        ))
        return [f"installed wake-up trigger on {tracked.table.name}"]

    def problems(self) -> list[str]:
        """Why this database is not ready to be run, each with its fix; empty when ready."""
        with self.engine.connect() as conn:
            version = _schema.current_version(conn)
            if version is None:
                return [f"the database has no Stator tables: {MIGRATE_HINT}"]
            if version > _schema.SCHEMA_VERSION:
                return [
                    f"the database's Stator schema is version {version}, newer than this "
                    f"Stator ({_schema.SCHEMA_VERSION}): upgrade the stator-engine package"
                ]
            found = []
            if version < _schema.SCHEMA_VERSION:
                found.append(f"the Stator schema is version {version}: {MIGRATE_HINT}")
            insp = inspect(conn)
            for tracked in self.tracked:
                name = tracked.table.name
                if not insp.has_table(name):
                    found.append(f"table {name} does not exist: {MIGRATE_HINT}")
                    continue
                columns = {c["name"] for c in insp.get_columns(name)}
                missing = [c for c in STATOR_COLUMNS if c not in columns]
                if missing:
                    found.append(
                        f"table {name} lacks Stator column(s) {', '.join(missing)}: {MIGRATE_HINT}"
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
        """Lease up to ``limit`` due rows; returns (ORM object, claim) pairs, objects detached."""
        sql = tracked.sql.get("claim")
        if sql is None or limit <= 0:
            return []
        params: dict[str, Any] = {"now": self.dialect.ts(now), "limit": limit}
        for i, state in enumerate(tracked.graph.scheduled_states()):
            params[f"lease_{i}"] = self.dialect.ts(now + timedelta(seconds=state.lease))
        statement = select(tracked.model).from_statement(
            text(sql).columns(*tracked.table.c)
        )
        with Session(self.engine, expire_on_commit=False, autoflush=False) as session:
            session.connection(execution_options=WRITE)
            objects = list(session.scalars(statement, params))
            session.commit()
            session.expunge_all()
        return [(obj, _claimed(obj, tracked)) for obj in objects]

    def write(
        self, tracked: TrackedModel, writes: Sequence[Write], conn: Connection | None = None
    ) -> set[Any]:
        """Apply fenced writes; returns the primary keys whose fence no longer held."""
        if not writes:
            return set()
        if conn is not None:
            return self._write(conn, tracked, writes)
        with self.engine.connect().execution_options(**WRITE) as own, own.begin():
            return self._write(own, tracked, writes)

    def write_all(
        self, groups: Sequence[tuple[TrackedModel, Sequence[Write]]]
    ) -> dict[str, set[Any]]:
        """Apply every model's writes in one transaction; lost primary keys per model."""
        with self.engine.connect().execution_options(**WRITE) as conn, conn.begin():
            return {t.name: self._write(conn, t, writes) for t, writes in groups if writes}

    def _write(self, conn: Connection, tracked: TrackedModel, writes: Sequence[Write]) -> set[Any]:
        updates = [w for w in writes if not w.delete]
        deletes = [w for w in writes if w.delete]
        applied: set[Any] = set()
        if updates:
            payload = json.dumps([self._payload(w) for w in updates])
            applied.update(conn.execute(text(tracked.sql["write"]), {"payload": payload}).scalars())
        if deletes:
            payload = json.dumps([self._payload(w) for w in deletes])
            applied.update(
                conn.execute(text(tracked.sql["delete"]), {"payload": payload}).scalars()
            )
        failures = [w for w in writes if w.failure is not None and w.pk in applied]
        if failures:
            self._record_errors(conn, tracked, failures)
        if any(w.moved for w in updates):
            self._notify_moves(conn, tracked)
        return {w.pk for w in writes} - applied

    def _notify_moves(self, conn: Connection, tracked: TrackedModel) -> None:
        """Tell idle workers elsewhere that rows moved (and may be due).  At most one NOTIFY
        per model per NOTIFY_EVERY: a busy worker picks its own moved rows up anyway, so a
        notification per batch would cost a round trip per batch for nothing."""
        notify = self.dialect.notify_sql()
        now = time.monotonic()
        if notify is None or now - self._notified.get(tracked.name, -NOTIFY_EVERY) < NOTIFY_EVERY:
            return
        self._notified[tracked.name] = now
        conn.execute(text(notify), {"table": tracked.table.name})

    def _payload(self, w: Write) -> dict[str, Any]:
        ts = self.dialect.ts_json
        return {
            "pk": w.pk, "fence_state": w.fence_state, "fence": ts(w.fence), "state": w.state,
            "changed": ts(w.state_changed), "next": ts(w.state_next), "attempts": w.attempts,
            "moved": w.moved,
            "changed_iso": w.state_changed.isoformat() if w.state_changed else None,
        }

    def _record_errors(self, conn: Connection, tracked: TrackedModel, writes: list[Write]) -> None:
        conn.execute(insert(_schema.errors_table), [
            {
                "model": tracked.name, "row_pk": row_key(w.pk), "state": w.fence_state,
                "attempt": w.attempt, "kind": w.failure.kind, "message": w.failure.message[:4000],
                "traceback": w.failure.traceback[-16000:],
                # When it failed: not the row's state_changed, which for a row that stays
                # is when it entered its state (maybe days ago: pruned at once, never shown).
                "created_at": w.failed_at or w.state_changed, "worker_id": self.worker_id,
            }
            for w in writes if w.failure is not None
        ])

    worker_id = "inline"

    def next_due(self, tracked: Iterable[TrackedModel]) -> datetime | None:
        """The earliest time any row of these models needs the engine (leases included)."""
        earliest: datetime | None = None
        with self.engine.connect().execution_options(**READ) as conn:
            for t in tracked:
                sql = t.sql.get("next_due")
                if sql is None:
                    continue
                for (value,) in conn.execute(text(f"SELECT min(due) FROM ({sql}) AS d")):
                    due = self._datetime.process_result_value(value, conn.dialect)
                    if due is not None and (earliest is None or due < earliest):
                        earliest = due
            conn.rollback()
        return earliest

    def due_depth(
        self, tracked: Iterable[TrackedModel], now: datetime
    ) -> dict[str, tuple[int, float]]:
        """Per model: rows due now and how late the oldest of them is, in seconds."""
        out: dict[str, tuple[int, float]] = {}
        with self.engine.connect().execution_options(**READ) as conn:
            for t in tracked:
                states = [s.name for s in t.graph.scheduled_states()]
                if not states:
                    continue
                listed = ", ".join(f"'{s}'" for s in states)
                count, oldest = conn.execute(text(
                    f"SELECT count(*), min(state_next) FROM {t.table.name} "
                    f"WHERE state IN ({listed}) AND state_next IS NOT NULL AND state_next <= :now"
                ), {"now": self.dialect.ts(now)}).one()
                first = self._datetime.process_result_value(oldest, conn.dialect)
                out[t.name] = (int(count), (now - first).total_seconds() if first else 0.0)
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

    def record_stats(self, rows: list[dict[str, Any]], prune_before: datetime) -> None:
        with self.engine.connect().execution_options(**WRITE) as conn, conn.begin():
            if rows:
                conn.execute(insert(_schema.stats_table), rows)
            stats, errors, workers = (
                _schema.stats_table, _schema.errors_table, _schema.workers_table
            )
            conn.execute(delete(stats).where(stats.c.period_end < prune_before))
            conn.execute(delete(errors).where(errors.c.created_at < prune_before))
            conn.execute(delete(workers).where(workers.c.last_seen < prune_before))

    # -- status ----------------------------------------------------------------------------

    def state_counts(self, now: datetime) -> list[dict[str, Any]]:
        """Per model and state: rows, due now, oldest due time, rows failing."""
        out = []
        due_at = self.dialect.ts(now)
        with self.engine.connect().execution_options(**READ) as conn:
            for t in self.tracked:
                rows = conn.execute(text(
                    f"SELECT state, count(*), "
                    f"sum(CASE WHEN state_next <= :now THEN 1 ELSE 0 END), "
                    f"min(CASE WHEN state_next <= :now THEN state_next END), "
                    f"sum(CASE WHEN state_attempts > 0 THEN 1 ELSE 0 END) "
                    f"FROM {t.table.name} GROUP BY state ORDER BY state"
                ), {"now": due_at})
                for state, count, due, oldest, failing in rows:
                    out.append({
                        "model": t.name, "state": state, "rows": int(count),
                        "due": int(due or 0),
                        "oldest_due": self._datetime.process_result_value(oldest, conn.dialect),
                        "failing": int(failing or 0),
                        "known": state in t.graph.states,
                    })
        return out

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

    def recent_errors(self, limit: int = 20) -> list[dict[str, Any]]:
        e = _schema.errors_table
        query = select(e).order_by(e.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def workers(self) -> list[dict[str, Any]]:
        w = _schema.workers_table
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(select(w).order_by(w.c.started_at))]


def _default_sql(column: Any, conn: Connection) -> str:
    default = column.server_default
    if default is None:
        return "NULL"
    return str(default.arg.compile(dialect=conn.dialect))


def _claimed(obj: Any, tracked: TrackedModel) -> Claimed:
    return Claimed(
        pk=getattr(obj, tracked.pk_attr), state=obj.state, state_changed=obj.state_changed,
        lease_until=obj.state_next, attempts=obj.state_attempts,
    )
