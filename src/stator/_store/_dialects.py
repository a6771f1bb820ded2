"""What differs between SQLite and PostgreSQL, and nothing else.

Everything here is a small piece of SQL or a connection setting; the statements built from
these pieces are shared (``_tracked.py``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, event

from .._types import to_sqlite_text

NOTIFY_CHANNEL = "stator"


class SqlDialect:
    name = "generic"
    skip_locked = ""

    def ts(self, value: datetime) -> Any:
        """A timestamp as a bound parameter."""
        return value

    def ts_json(self, value: datetime | None) -> str | None:
        """A timestamp inside a JSON payload."""
        return None if value is None else value.astimezone(UTC).isoformat()

    def payload_source(self, columns: list[tuple[str, str]]) -> str:
        raise NotImplementedError

    def history_append(self, table: str, history_type: str) -> str:
        raise NotImplementedError

    def notify_sql(self) -> str | None:
        return None

    def configure(self, engine: Engine) -> None:
        """Set per-connection behaviour the engine relies on."""


class SqliteDialect(SqlDialect):
    name = "sqlite"

    def ts(self, value: datetime) -> Any:
        return to_sqlite_text(value)

    def ts_json(self, value: datetime | None) -> str | None:
        return None if value is None else to_sqlite_text(value)

    def payload_source(self, columns: list[tuple[str, str]]) -> str:
        picks = ", ".join(f"value->>'{name}' AS {name}" for name, _ in columns)
        return f"(SELECT {picks} FROM json_each(:payload)) AS v"

    def history_append(self, table: str, history_type: str) -> str:
        return (
            f"json_insert(coalesce({table}.state_history, '[]'), '$[#]', "
            "json_array(v.state, v.changed_iso))"
        )

    def configure(self, engine: Engine) -> None:
        configure_sqlite(engine)


class PostgresDialect(SqlDialect):
    name = "postgresql"
    skip_locked = " FOR UPDATE SKIP LOCKED"

    def payload_source(self, columns: list[tuple[str, str]]) -> str:
        spec = ", ".join(f"{name} {sqltype}" for name, sqltype in columns)
        return f"json_to_recordset(CAST(:payload AS json)) AS v({spec})"

    def history_append(self, table: str, history_type: str) -> str:
        return (
            f"CAST(coalesce(CAST({table}.state_history AS jsonb), CAST('[]' AS jsonb)) || "
            "jsonb_build_array(jsonb_build_array(v.state, v.changed_iso)) "
            f"AS {history_type})"
        )

    def notify_sql(self) -> str | None:
        return f"SELECT pg_notify('{NOTIFY_CHANNEL}', :table)"


def dialect_for(engine_or_name: Engine | str) -> SqlDialect:
    name = engine_or_name if isinstance(engine_or_name, str) else engine_or_name.dialect.name
    if name == "sqlite":
        return SqliteDialect()
    if name == "postgresql":
        return PostgresDialect()
    from ..errors import ConfigError

    raise ConfigError(f"Stator supports SQLite and PostgreSQL, not {name!r}")


# -- SQLite transaction control ------------------------------------------------------------
# pysqlite's own transaction handling is turned off so that Stator decides how each
# transaction begins: the engine's writes take the write lock up front (BEGIN IMMEDIATE, so
# they queue on busy_timeout instead of failing mid-transaction); handler sessions read
# without holding a snapshot and take the lock only when they first write.

BEGIN_OPTION = "stator_begin"


def configure_sqlite(engine: Engine) -> None:
    if getattr(engine, "_stator_configured", False):
        return
    engine._stator_configured = True  # type: ignore[attr-defined]

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA busy_timeout = 10000")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(BEGIN_OPTION, "deferred")
        if mode == "immediate":
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        elif mode == "deferred":
            conn.exec_driver_sql("BEGIN")
        # "lazy": no transaction until the first write (see handler sessions)
