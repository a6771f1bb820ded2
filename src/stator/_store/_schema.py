"""Stator's own tables, and the versioned migrations that create and upgrade them.

``stator_schema`` holds one row: the schema version.  A database at an older version is
upgraded by ``stator migrate``; one at a newer version than this code knows is refused, so
an old worker never runs against a schema it does not understand.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    inspect,
    select,
)

from .._types import UTCDateTime

SCHEMA_VERSION = 1

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


def _v1(conn: Connection) -> None:
    metadata.create_all(conn)


MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _v1}


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
