"""Stator's own records of a database's workers, stats and errors, shared by both drivers.

What ``stator status``, the dashboard and the worker's housekeeping read and write, through
the driver's engine: the rows of ``stator_workers``, ``stator_stats``, ``stator_edge_stats``
and ``stator_errors`` (``_schema.py``).
"""

from __future__ import annotations

import json
import socket
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import (
    Engine,
    TextClause,
    bindparam,
    create_engine,
    delete,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.pool import StaticPool

from . import _schema
from ._dialects._sqlite import configure_sqlite
from ._operations import WRITE
from ._records import EdgeCount, Heartbeat, StatsPeriod

if TYPE_CHECKING:  # what the readers get back, imported where they read
    from ._read_records import ErrorRecord, ModelStats, WorkerRecord


def _typed(sql: str) -> TextClause:
    """A statement on the workers table, built once, its values bound as the columns' types."""
    columns = _schema.workers_table.c
    return text(sql).bindparams(*(bindparam(c.name, type_=c.type) for c in columns))


_BEAT_COLUMNS = ("hostname", "pid", "started_at", "last_seen", "concurrency", "models", "threads")
# The heartbeat, every few seconds while a worker idles: plain text, nothing built per beat.
_BEAT_UPDATE = _typed(
    "UPDATE stator_workers SET " + ", ".join(f"{c} = :{c}" for c in _BEAT_COLUMNS)
    + " WHERE id = :id"
)
_BEAT_INSERT = _typed(
    f"INSERT INTO stator_workers (id, {', '.join(_BEAT_COLUMNS)}) "
    f"VALUES (:id, {', '.join(':' + c for c in _BEAT_COLUMNS)})"
)


class Bookkeeping:
    """The workers, stats and errors tables of one database (held by a driver)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def on_sqlite_connection(cls, conn: sqlite3.Connection) -> Bookkeeping:
        """The records written on one SQLite connection of the caller's (the wake-up
        listener's, whose own commits do not wake its worker), with the statements and
        transactions (BEGIN IMMEDIATE, busy_timeout) of a driver's engine.  Its
        ``engine.dispose()`` closes the connection."""
        engine = create_engine("sqlite://", creator=lambda: conn, poolclass=StaticPool)
        configure_sqlite(engine)
        return cls(engine)

    def heartbeat(self, beat: Heartbeat) -> None:
        row = {
            "id": beat.worker_id, "hostname": socket.gethostname(), "pid": beat.pid,
            "started_at": beat.started, "last_seen": beat.now, "concurrency": beat.concurrency,
            "models": ",".join(beat.models), "threads": json.dumps(dict(beat.threads)),
        }
        with self.engine.connect().execution_options(**WRITE) as conn, conn.begin():
            if not conn.execute(_BEAT_UPDATE, row).rowcount:
                conn.execute(_BEAT_INSERT, row)

    def forget_worker(self, worker_id: str) -> None:
        table = _schema.workers_table
        with self.engine.connect().execution_options(**WRITE) as conn, conn.begin():
            conn.execute(delete(table).where(table.c.id == worker_id))

    def record_stats(
        self, periods: Sequence[StatsPeriod], prune_before: datetime,
        edges: Sequence[EdgeCount] = (),
    ) -> None:
        """One stats period per model, and its transitions per edge (``edges``)."""
        with self.engine.connect().execution_options(**WRITE) as conn, conn.begin():
            if periods:
                conn.execute(insert(_schema.stats_table), [p.as_row() for p in periods])
            if edges:
                conn.execute(insert(_schema.edge_stats_table), [e.as_row() for e in edges])
            edge_stats = _schema.edge_stats_table
            conn.execute(delete(edge_stats).where(edge_stats.c.period_end < prune_before))
            stats, errors, workers = (
                _schema.stats_table, _schema.errors_table, _schema.workers_table
            )
            conn.execute(delete(stats).where(stats.c.period_end < prune_before))
            conn.execute(delete(errors).where(errors.c.created_at < prune_before))
            conn.execute(delete(workers).where(workers.c.last_seen < prune_before))

    def recent_stats(self, since: datetime) -> list[ModelStats]:
        from ._read_records import ModelStats

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
                ModelStats(model=m, processed=int(p or 0), transitions=int(tr or 0),
                           errors=int(e or 0), timeouts=int(to or 0), lost=int(lo or 0),
                           max_lag=float(lag or 0))
                for m, p, tr, e, to, lo, lag in conn.execute(query)
            ]

    def recent_errors(
        self, limit: int = 20, models: Sequence[str] | None = None
    ) -> list[ErrorRecord]:
        """The newest errors, of ``models`` only if given (another app may share the
        database and Stator's tables)."""
        from ._read_records import ErrorRecord

        e = _schema.errors_table
        query = select(e).order_by(e.c.id.desc()).limit(limit)
        if models is not None:
            query = query.where(e.c.model.in_(list(models)))
        with self.engine.connect() as conn:
            return [ErrorRecord(**r._mapping) for r in conn.execute(query)]

    def workers(self, models: Sequence[str] | None = None) -> list[WorkerRecord]:
        """Workers that run any of ``models`` (all workers if not given)."""
        from ._read_records import WorkerRecord

        w = _schema.workers_table
        with self.engine.connect() as conn:
            rows = [WorkerRecord.from_row(r._mapping)
                    for r in conn.execute(select(w).order_by(w.c.started_at))]
        if models is None:
            return rows
        wanted = set(models)
        return [r for r in rows if wanted & set(r.models)]
