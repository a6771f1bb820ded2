"""Stator's own tables, and the versioned migrations that create and upgrade them.

``stator_schema`` holds one row: the schema version.  A database at an older version is
upgraded by ``stator migrate``; one at a newer version than this code knows is refused, so
an old worker never runs against a schema it does not understand.

Version 2 adds ``stator_launcher_messages``: the launcher's control messages (start, stop,
restart) for this database, inserted in the sender's own transaction so that a rolled-back
transaction sends nothing.  ``uninstall`` drops Stator's tables but keeps that one, so the
launcher still hears the ``restart`` sent by the uninstalling transaction itself.

Version 3 adds what the dashboard needs: ``stator_paused`` (models whose rows workers must
not claim), ``stator_actions`` (who did what from the dashboard, and when) and
``stator_edge_stats`` (transitions per edge and stats period, for the graph's edge rates).

Version 4 adds ``stator_schedules``: one row per periodic schedule, run by the engine like
an application's row (its ``state_next`` is its next tick; see ``stator._schedules``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    event,
    inspect,
    select,
    text,
)

from .._types import UTCDateTime, utc_now_plus

SCHEMA_VERSION = 4
# The columns Stator adds to an application's table (``StatorMixin``, ``StatorModel``).
STATOR_COLUMNS = ("state", "state_changed", "state_next", "state_attempts")

metadata = MetaData()

schema_table = Table("stator_schema", metadata, Column("version", Integer, nullable=False))

workers_table = Table(
    "stator_workers",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("hostname", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("last_seen", UTCDateTime(), nullable=False),
    Column("concurrency", Integer, nullable=False),
    Column("models", Text, nullable=False),
    Column("threads", Text, nullable=False),  # JSON: thread name -> reported state
)

stats_table = Table(
    "stator_stats",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("worker_id", String(64), nullable=False),
    Column("model", String(255), nullable=False),
    Column("period_start", UTCDateTime(), nullable=False),
    Column("period_end", UTCDateTime(), nullable=False),
    Column("processed", Integer, nullable=False),
    Column("transitions", Integer, nullable=False),
    Column("errors", Integer, nullable=False),
    Column("timeouts", Integer, nullable=False),
    Column("deleted", Integer, nullable=False),
    Column("lost", Integer, nullable=False),  # writes refused by the fence
    Column("queue_depth", Integer, nullable=False),
    Column("lag_seconds", Float, nullable=False),
    Index("ix_stator_stats_end", "period_end"),
)

errors_table = Table(
    "stator_errors",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("model", String(255), nullable=False),
    Column("row_pk", String(255), nullable=False),
    Column("state", String(100), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("kind", String(20), nullable=False),
    Column("message", Text, nullable=False),
    Column("traceback", Text, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("worker_id", String(64), nullable=False),
    Index("ix_stator_errors_model_created", "model", "created_at"),
)


# Version 2's table lives in a metadata of its own: version 1's migration creates everything
# in ``metadata``, and must keep creating exactly what it always did.
control_metadata = MetaData()

messages_table = Table(
    "stator_launcher_messages",
    control_metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("kind", String(16), nullable=False),  # start, stop, restart
    Column("sent_at", UTCDateTime(), nullable=False),
    Column("sender", String(255), nullable=False),
    Column("handled_at", UTCDateTime(), nullable=True),  # set by the launcher's acknowledgement
    Column("ack", Boolean(), nullable=True),
    Column("outcome", Text, nullable=True),
)


# Version 3's tables: a metadata of their own, for the same reason.
dashboard_metadata = MetaData()

paused_table = Table(
    "stator_paused",
    dashboard_metadata,
    Column("model", String(255), primary_key=True),
    Column("paused_at", UTCDateTime(), nullable=False),
    Column("paused_by", String(255), nullable=False),
)

actions_table = Table(
    "stator_actions",
    dashboard_metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("actor", String(255), nullable=False),  # who: the dashboard user's address
    Column("action", String(32), nullable=False),  # retry, move, retry_failing, pause, resume
    Column("model", String(255), nullable=False),
    Column("row_pk", String(255), nullable=True),
    Column("detail", Text, nullable=False),  # what it did, e.g. "pending -> done"
    Column("affected", Integer, nullable=False),
    Index("ix_stator_actions_created", "created_at"),
)

edge_stats_table = Table(
    "stator_edge_stats",
    dashboard_metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("worker_id", String(64), nullable=False),
    Column("model", String(255), nullable=False),
    Column("source", String(100), nullable=False),
    Column("target", String(100), nullable=False),
    Column("period_end", UTCDateTime(), nullable=False),
    Column("count", Integer, nullable=False),
    Index("ix_stator_edge_stats_end", "period_end"),
)


# Version 4's table: a metadata of its own, for the same reason.
schedule_metadata = MetaData()

schedules_table = Table(
    "stator_schedules",
    schedule_metadata,
    Column("name", String(200), primary_key=True),
    Column("kind", String(16), nullable=False),  # task, insert, move
    Column("definition", Text, nullable=False),  # JSON: what the row fires (``_schedule``)
    Column("digest", String(64), nullable=False),  # names the definition
    Column("next_tick", UTCDateTime(), nullable=True),  # NULL: from the next tick after now
    Column("last_tick", UTCDateTime(), nullable=True),
    Column("last_fired_at", UTCDateTime(), nullable=True),
    Column("last_outcome", Text, nullable=True),
    Column("fired", Integer, nullable=False, server_default=text("0")),
    Column("missed", Integer, nullable=False, server_default=text("0")),
    Column("updated_at", UTCDateTime(), nullable=False),  # the definition's last change
    # The four Stator columns, as ``StatorMixin`` declares them for ``ScheduleStates``.
    Column("state", String(100), nullable=False, server_default="active"),
    Column("state_changed", UTCDateTime(), nullable=False, server_default=utc_now_plus()),
    Column("state_next", UTCDateTime(), nullable=True, server_default=utc_now_plus()),
    Column("state_attempts", Integer, nullable=False, server_default=text("0")),
)


def _partial_index(table: Table, name: str, columns: str, where: str) -> None:
    """A partial index, created with its table.  Spelt as SQL (the same on SQLite and
    PostgreSQL), not as an ``Index`` with ``postgresql_where``/``sqlite_where``: naming a
    database in an index's options loads SQLAlchemy's whole dialect for it when this module
    is imported (PostgreSQL's, with asyncpg's and pg8000's, on a SQLite worker too), about
    30 ms of every process's start."""
    statement = text(f"CREATE INDEX {name} ON {table.name} ({columns}) WHERE {where}")

    def create(_table: Table, conn: Connection, **_kw: Any) -> None:
        conn.execute(statement)

    event.listen(table, "after_create", create)


_partial_index(messages_table, "ix_stator_launcher_messages_pending", "id",
               "handled_at IS NULL")
_partial_index(schedules_table, "ix_stator_schedules_stator_due", "state, state_next",
               "state_next IS NOT NULL")


def _v1(conn: Connection) -> None:
    metadata.create_all(conn)


def _v2(conn: Connection) -> None:
    control_metadata.create_all(conn)


def _v3(conn: Connection) -> None:
    dashboard_metadata.create_all(conn)


def _v4(conn: Connection) -> None:
    schedule_metadata.create_all(conn)


MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _v1, 2: _v2, 3: _v3, 4: _v4}


def current_version(conn: Connection) -> int | None:
    """The schema version recorded in the database, or None if Stator was never installed."""
    if not inspect(conn).has_table("stator_schema"):
        return None
    return conn.execute(select(schema_table.c.version)).scalar_one_or_none() or 0


def upgrade(conn: Connection) -> list[int]:
    """Apply every migration the database lacks; returns the versions applied."""
    version = current_version(conn) or 0
    if version > SCHEMA_VERSION:
        from ..errors import SchemaError

        raise SchemaError(
            f"the database's Stator schema is version {version}, newer than this Stator "
            f"understands ({SCHEMA_VERSION}); upgrade the stator-engine package"
        )
    applied = []
    for number in sorted(MIGRATIONS):
        if number > version:
            MIGRATIONS[number](conn)
            applied.append(number)
    if applied:
        conn.execute(schema_table.delete())
        conn.execute(schema_table.insert().values(version=SCHEMA_VERSION))
    return applied


def uninstall(conn: Connection) -> list[str]:
    """Drop Stator's own tables (not the application's tables or their state columns).

    The launcher's message table stays: the uninstalling transaction sends ``restart``
    through it, and the launcher must be able to read and acknowledge that message.
    """
    done = []
    insp = inspect(conn)
    tables = [*metadata.sorted_tables, *dashboard_metadata.sorted_tables,
              *schedule_metadata.sorted_tables]
    for table in reversed(tables):
        if insp.has_table(table.name):
            table.drop(conn)
            done.append(f"dropped table {table.name}")
    return done
