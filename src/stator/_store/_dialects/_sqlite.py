"""SQLite's answers: times as fixed-width text, JSON through json_each, one writer at a time,
and the transaction control the engine needs (pysqlite's own turned off)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where it runs (see ``_base``)
    from sqlalchemy import URL, Engine
    from sqlalchemy.types import TypeEngine

from ..._time_text import to_sqlite_text
from ._base import SqlDialect


class SqliteDialect(SqlDialect):
    name = "sqlite"
    constant_added_defaults = True
    wal = True

    row_by_row_writes = True
    # A claim ordered by priority reads its state's rows in the order of the priority index
    # and stops at :limit due ones.  Given the bare column, SQLite's planner range-scans the
    # (state, state_next) index instead, fetches every due row and sorts them all: a claim
    # then costs the whole backlog (5,000 queued tasks: twice the time of the UPDATE of its
    # 100 rows).  The unary plus keeps the comparison (text with text) and hides the range.
    prioritized_due = "+state_next <= :now"
    # Ranked over the union partitioned by state, SQLite merges the branches into state
    # order, sorting each branch's rows again in a temporary b-tree, then sorts the union:
    # ranked in each branch, about a fifth of a claim's CPU less with three states due
    # (10.9 -> 8.6 us per claimed row).
    rank_in_branches = True
    single_writer = True
    times_as_text = True

    def url_from_django(self, settings: dict[str, Any]) -> URL:
        from sqlalchemy import URL

        return URL.create("sqlite", database=str(settings["NAME"]))

    def ts(self, value: datetime) -> Any:
        return to_sqlite_text(value)

    def time_type(self) -> TypeEngine[Any]:
        from sqlalchemy import String

        return String(26)  # ``_time_text``: fixed-width, sorts in time order

    def in_memory(self, url: URL) -> bool:
        database = url.database or ""
        return not database or database == ":memory:" or "mode=memory" in database or (
            str(url.query.get("mode", "")) == "memory")

    def database_file(self, url: URL) -> Path | None:
        if not url.database or url.database == ":memory:":
            return None
        if str(url.query.get("uri", "")).lower() in ("true", "1") or url.database.startswith(
                "file:"):
            return None
        return Path(url.database)

    def ts_json(self, value: datetime | None) -> str | None:
        return None if value is None else to_sqlite_text(value)

    def payload_source(self, columns: list[tuple[str, str]]) -> str:
        picks = ", ".join(f"value->>'{name}' AS {name}" for name, _ in columns)
        return f"(SELECT {picks} FROM json_each(:payload)) AS v"

    def stale_snapshot(self, message: str) -> bool:
        # SQLite cannot upgrade a read transaction whose snapshot is out of date: someone
        # committed since it first read, so it may have moved the rows it meant to write.
        return "locked" in message

    def history_append(
        self, table: str, history_type: str, state: str = "v.state",
        changed_iso: str = "v.changed_iso",
    ) -> str:
        # A history that is JSON but not an array (raw SQL, another tool) becomes the first
        # element of one, as PostgreSQL's ``||`` does: json_insert's '$[#]' would otherwise
        # leave it unchanged, dropping the transition from the history without a word.
        history = f"coalesce({table}.state_history, '[]')"
        return (
            f"json_insert(CASE json_type({history}) WHEN 'array' THEN {history} "
            f"ELSE json_array(json({history})) END, '$[#]', "
            f"json_array({state}, {changed_iso}))"
        )

    def configure(self, engine: Engine, timeouts: Iterable[float] = ()) -> None:
        configure_sqlite(engine)

    # -- what the launcher, the benchmarks and the operator's reads ask of a backend -------
    default_driver = "sqlite"
    database_is_file = True
    wake_up = "PRAGMA data_version poll"
    named_params = True
    begin_for_writes = "BEGIN IMMEDIATE"
    integers_64_bit = True
    analyze_prelude = ("PRAGMA analysis_limit = 1000",)

    def canonical_url(self, url: URL, base: str) -> URL | None:
        database = url.database
        if not database or database == ":memory:" or database.startswith("file:"):
            return None
        path = os.path.abspath(os.path.join(base, database))
        return url.set(drivername=self.default_driver, database=path)

    def series(self, start: int, stop: int, step: int = 1) -> str:
        return (
            f"(WITH RECURSIVE n(g) AS (SELECT {start} UNION ALL SELECT g + {step} FROM n "
            f"WHERE g + {step} <= {stop}) SELECT g FROM n) AS series"
        )

    def django_database(self, url: URL) -> dict[str, Any]:
        # What ``configure_sqlite`` sets on the engine's connections, so both sides match.
        return {
            "ENGINE": "django.db.backends.sqlite3", "NAME": url.database,
            "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
        }

    # -- the columns of stator.django (see ``SqlDialect``) ----------------------------------

    def django_time(self, value: datetime) -> str | None:
        # Django writes ``str(datetime)``, which drops a zero fraction; ``state_next`` is a
        # fencing token compared for equality, so every writer spells a time the same way.
        return to_sqlite_text(value if value.tzinfo is not None else value.replace(tzinfo=UTC))

    def django_shown_time(self, sql: str) -> tuple[str, int]:
        # A time SQLite reads, on a day that exists, before 24:00; garbage text reads as NULL.
        return (f"(CASE WHEN julianday({sql}) IS NOT NULL AND date(julianday(substr("
                f"{sql}, 1, 10))) = substr({sql}, 1, 10) AND substr({sql}, 12, 2) < '24' "
                f"THEN {sql} END)", 5)

    def django_now_plus(self, seconds: float) -> str:
        if seconds:
            return f"(strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+{seconds:.6f} seconds'))"
        return "(strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now'))"


# -- SQLite transaction control ------------------------------------------------------------
# pysqlite's own transaction handling is turned off so that Stator decides how each
# transaction begins: the engine's writes take the write lock up front (BEGIN IMMEDIATE, so
# they queue on busy_timeout instead of failing mid-transaction); handler sessions read
# without holding a snapshot and take the lock only when they first write.

BEGIN_OPTION = "stator_begin"


def is_stator_database(cursor: Any) -> bool:
    """Whether Stator's tables are in this SQLite database.  WAL is a lasting property of a
    file: it is switched on only for Stator's own databases (and by ``migrate``), so a command
    pointed at the wrong file (another application's database, an empty file) changes
    nothing there."""
    cursor.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stator_schema'")
    return cursor.fetchone() is not None


def use_wal(engine: Engine) -> None:
    """Switch a SQLite database that has just become Stator's to WAL (see
    ``is_stator_database``)."""
    with engine.connect().execution_options(**{BEGIN_OPTION: "lazy"}) as conn:
        conn.exec_driver_sql("PRAGMA journal_mode = WAL")  # outside any transaction


def configure_sqlite(engine: Engine) -> None:
    if getattr(engine, "_stator_configured", False):
        return
    engine._stator_configured = True  # type: ignore[attr-defined]
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA busy_timeout = 10000")
        if is_stator_database(cursor):
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(BEGIN_OPTION, "deferred")
        if mode == "immediate":
            _begin(conn, "BEGIN IMMEDIATE")
        elif mode == "deferred":
            _begin(conn, "BEGIN")
        # "lazy": no transaction until the first write (see handler sessions)


def _begin(conn: Any, statement: str) -> None:
    """``statement`` on the connection's DB-API cursor.  Through ``exec_driver_sql`` it cost
    about 26 µs of the ~60 µs a transaction's opening and closing costs SQLAlchemy: a
    claim and a write-back run one each per batch.  An error is raised as SQLAlchemy's own
    execution raises it, for the worker's retry policy (busy, disk full)."""
    error = conn.dialect.loaded_dbapi.Error
    cursor = conn.connection.dbapi_connection.cursor()
    try:
        cursor.execute(statement)
    except error as exc:
        from sqlalchemy.exc import DBAPIError

        raise DBAPIError.instance(statement, (), exc, error) from exc
    finally:
        cursor.close()
