"""Throwaway places to benchmark in, and fast ways to fill them.

SQLite: a new file per scenario in a temporary folder.  PostgreSQL: a new database per
scenario on the server ``--db`` names (so its ``pg_stat_database`` counters and its
backends are the benchmark's alone), dropped afterwards even when the run fails; if the role
may not create databases, a new schema in the given database instead.  Every PostgreSQL
connection the benchmark makes carries one ``application_name``, which is how its server
processes are found for CPU accounting.
"""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from .._store._dialects import dialect_for
from .._urls import shown
from ..errors import ConfigError

CHUNK = 1_000_000  # rows per INSERT … SELECT when filling big tables


@dataclass(frozen=True)
class Place:
    """Where one scenario runs."""

    url: str  # a SQLAlchemy URL, password included (child processes connect with it)
    backend: str  # "sqlite" or "postgresql"
    database: str | None = None  # PostgreSQL: the database's name
    isolated: bool = True  # PostgreSQL: a database of its own (its statistics are ours)
    app_name: str = ""  # PostgreSQL: application_name of every benchmark connection


class Server:
    """Hands out throwaway places; ``None`` means SQLite files in a temporary folder."""

    def __init__(self, db: str | None, folder: Path) -> None:
        self.token = secrets.token_hex(4)
        self.folder = folder
        self.admin_url: URL | None = None
        if db is not None:
            self.admin_url = _postgres_url(db)

    @property
    def backend(self) -> str:
        return "sqlite" if self.admin_url is None else "postgresql"

    @property
    def app_name(self) -> str:
        return f"stator-bench-{self.token}"

    def admin_engine(self) -> Engine:
        """An autocommit engine on the server's own database, for DDL and statistics."""
        assert self.admin_url is not None
        url = self.admin_url.update_query_dict({"application_name": "stator-bench-monitor"})
        return create_engine(url, isolation_level="AUTOCOMMIT", pool_size=1, max_overflow=2)

    @contextmanager
    def place(self, scenario: str) -> Iterator[Place]:
        if self.admin_url is None:
            yield from self._sqlite_place(scenario)
        else:
            yield from self._postgres_place(scenario)

    def _sqlite_place(self, scenario: str) -> Iterator[Place]:
        path = self.folder / f"{scenario}-{secrets.token_hex(3)}.db"
        try:
            yield Place(url=f"sqlite:///{path}", backend="sqlite")
        finally:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)

    def _postgres_place(self, scenario: str) -> Iterator[Place]:
        assert self.admin_url is not None
        name = f"stator_bench_{self.token}_{scenario}"
        admin = self.admin_engine()
        try:
            isolated = _create_database(admin, name)
            url = self.admin_url.update_query_dict({"application_name": self.app_name})
            if isolated:
                url = url.set(database=name)
            else:
                url = url.update_query_dict({"options": f"-csearch_path={name}"})
            try:
                yield Place(
                    url=url.render_as_string(hide_password=False), backend="postgresql",
                    database=url.database, isolated=isolated, app_name=self.app_name,
                )
            finally:
                with admin.connect() as conn:
                    if isolated:
                        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                    else:
                        conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        finally:
            admin.dispose()


def _postgres_url(db: str) -> URL:
    try:
        url = make_url(db)
    except (ArgumentError, ValueError) as exc:
        raise ConfigError(f"not a database URL: {shown(db)!r}") from exc
    try:
        dialect = dialect_for(url.get_backend_name())
    except ConfigError:
        raise ConfigError(
            f"stator bench measures SQLite or PostgreSQL, not {shown(db)!r}"
        ) from None
    if dialect.database_is_file:
        raise ConfigError(
            "stator bench needs no --db for SQLite (it uses throwaway files); "
            "give --db a PostgreSQL server URL"
        )
    if "+" not in url.drivername:  # no driver named: the one Stator is tested with
        url = url.set(drivername=dialect.default_driver)
    return url


def _create_database(admin: Engine, name: str) -> bool:
    """Create a database for the scenario; False (a schema made instead) if not allowed."""
    with admin.connect() as conn:
        try:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
            return True
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) != "42501":  # insufficient_privilege
                raise
        conn.execute(text(f'CREATE SCHEMA "{name}"'))
        return False


def insert_rows(
    engine: Engine, table: str, first_id: int, count: int, *,
    terminal: str | None = None, extra: dict[str, Any] | None = None,
) -> None:
    """Insert ``count`` rows with ids from ``first_id``, fast, by one INSERT … SELECT per
    million.  Stator's columns keep their server defaults (initial state, due at once),
    unless ``terminal`` names a state to put them in with nothing due (``state_next`` NULL).
    """
    columns, values = ["id"], ["g"]
    if terminal is not None:
        columns += ["state", "state_next"]
        values += [f"'{terminal}'", "NULL"]
    for name, value in (extra or {}).items():
        columns.append(name)
        values.append(str(value))
    listed, picked = ", ".join(columns), ", ".join(values)
    dialect = dialect_for(engine)
    for start in range(first_id, first_id + count, CHUNK):
        stop = min(start + CHUNK, first_id + count) - 1
        series = dialect.series(start, stop)
        sql = f"INSERT INTO {table} ({listed}) SELECT {picked} FROM {series}"
        with engine.begin() as conn:
            conn.execute(text(sql))


def make_due(engine: Engine, table: str, ids: range, state: str) -> None:
    """Put the rows with these ids back into ``state``, due a second ago (index lookups
    only, so it stays quick in a table of millions)."""
    dialect = dialect_for(engine)
    due = dialect.ts(datetime.now(UTC) - timedelta(seconds=1))
    source = f"SELECT g FROM {dialect.series(ids.start, ids.stop - 1, ids.step)}"
    with engine.begin() as conn:
        conn.execute(
            text(
                f"UPDATE {table} SET state = :state, state_next = :due, state_attempts = 0 "
                f"WHERE id IN ({source})"
            ),
            {"state": state, "due": due},
        )


def analyze(engine: Engine, table: str) -> None:
    """Fresh planner statistics, as autovacuum (PostgreSQL) or ``PRAGMA optimize`` would
    leave them in a live system."""
    with engine.begin() as conn:
        for setting in dialect_for(engine).analyze_prelude:
            conn.execute(text(setting))
        conn.execute(text(f"ANALYZE {table}"))


def hold_vacuum(engine: Engine, table: str) -> None:
    """PostgreSQL: no autovacuum on this table; ``vacuum`` cleans it between passes instead.

    Autovacuum wakes on a share of a table's rows (20%), so it would churn through a small
    table many times during a measurement and never touch a big one: a difference in
    background work, not in what a claim costs.
    """
    sql = dialect_for(engine).no_autovacuum_sql(table)
    if sql is not None:
        with engine.begin() as conn:
            conn.execute(text(sql))


def vacuum(engine: Engine, table: str) -> None:
    """PostgreSQL: clear the dead row versions the last pass left and refresh statistics, so
    every pass starts from the same clean state.  SQLite updates in place: nothing to do."""
    sql = dialect_for(engine).vacuum_sql(table)
    if sql is None:
        return
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(sql))


def temporary_folder() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="stator-bench-")
