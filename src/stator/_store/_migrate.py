"""A database's readiness and the schema the SQLAlchemy driver migrates.

``SchemaKeeper`` creates Stator's own tables and, for the SQLAlchemy driver, the tracked
tables and their Stator columns (added to tables that exist, with defaults that treat the
existing rows as inserted now); it installs the wake-up trigger where the database has
NOTIFY, and says what a database lacks before a worker runs on it (``problems``).  The Django
driver uses the parts Django's migrations leave to it (Stator's tables, the trigger,
``problems``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.schema import CreateTable

from .._clock import Clock
from .._policy import first_due
from ..errors import SchemaError
from . import _schema
from ._dialects import SqlDialect, dialect_named, use_wal
from ._operations import WRITE
from ._schema import STATOR_COLUMNS
from ._tracked import TrackedModel

SQLITE_ADDED_SENTINEL = "0001-01-01 00:00:00.000000"  # "the insert's time", see migrate


class SchemaKeeper:
    """The schema of one database as a driver sees it (``migrate_hint``: how its users
    migrate, named in every problem found)."""

    def __init__(
        self, engine: Engine, dialect: SqlDialect, tracked: list[TrackedModel], migrate_hint: str,
        clock: Clock,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.dialect = dialect
        self.tracked = tracked
        self.migrate_hint = migrate_hint

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
        if self.dialect.wal:
            use_wal(self.engine)
        return done

    def _migrate_table(self, conn: Connection, tracked: TrackedModel) -> list[str]:
        insp = inspect(conn)
        table = tracked.table
        if not insp.has_table(table.name):
            table.create(conn)
            return [f"created table {table.name}", *self.install_notify(conn, tracked)]
        done = []
        existing = {c["name"] for c in insp.get_columns(table.name)}
        added = [name for name in STATOR_COLUMNS if name not in existing]
        now = self.clock.now()  # existing rows are treated as inserted now
        for name in added:
            conn.execute(text(self._add_column_sql(tracked, name, conn, now)))
            if not self.dialect.constant_added_defaults:
                # That constant default only fills the existing rows; later inserts need
                # the model's own (the database's now, not the migration's).
                conn.execute(text(self._restore_default_sql(tracked, name, conn)))
            done.append(f"added column {table.name}.{name}")
        if self.dialect.constant_added_defaults and {"state_changed", "state_next"} & set(added):
            done.extend(self._sqlite_time_defaults(conn, tracked))
        indexes = {ix["name"] for ix in insp.get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in indexes and all(c.name in STATOR_COLUMNS for c in index.columns):
                index.create(conn)
                done.append(f"created index {index.name}")
        return done + self.install_notify(conn, tracked)

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
        if not self.dialect.constant_added_defaults:
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

    def install_notify(self, conn: Connection, tracked: TrackedModel) -> list[str]:
        """The wake-up trigger on ``tracked``'s table, where the database has NOTIFY."""
        if not self.dialect.listen_notify:
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

    def uninstall(self, then: Callable[[Connection], None] | None = None) -> list[str]:
        """Drop Stator's own tables (``_schema.uninstall``) and, in the same transaction once
        any was dropped, ``then(conn)``; nothing on a SQLite file that is not there (no empty
        file left behind)."""
        if missing_sqlite_file(self.engine) is not None:
            return []
        with self.engine.connect().execution_options(**WRITE) as conn, conn.begin():
            done = _schema.uninstall(conn)
            if done and then is not None:
                then(conn)
        return done

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
                columns = _column_names(conn, name)
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


def _column_names(conn: Connection, table: str) -> set[str]:
    """The columns of ``table`` (which exists), read from an empty result: one plain query,
    where the inspector's reflection builds and compiles its catalogue queries first (about
    15 ms of a worker's start on PostgreSQL)."""
    quoted = conn.dialect.identifier_preparer.quote(table)
    return set(conn.exec_driver_sql(f"SELECT * FROM {quoted} WHERE 1 = 0").keys())


def missing_sqlite_file(engine: Engine) -> Path | None:
    """The path of a database file that does not exist (yet), else None."""
    path = dialect_named(engine.url.get_backend_name()).database_file(engine.url)
    return None if path is None or path.exists() else path


def read_only_sqlite(engine: Engine) -> str | None:
    """Why a database file cannot be used, if it lies on a read-only filesystem.

    SQLite would only say "unable to open database file" (it cannot create the WAL's files
    beside it), which sends one looking for a wrong path.  A file that is merely not writable
    by this user is SQLite's to report ("readonly database")."""
    path = dialect_named(engine.url.get_backend_name()).database_file(engine.url)
    if path is None:
        return None
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
