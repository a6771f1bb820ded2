"""The floor every engine is measured against: the smallest correct claim + fenced write-back
loop, written without Stator's statements, engine or ORM.

A table ``(id, state, state_next, state_changed)`` with a partial index on ``state_next``
where it is set; then, until nothing is due: one statement leases up to ``batch`` due rows
(``UPDATE … WHERE id IN (SELECT … ORDER BY state_next LIMIT n FOR UPDATE SKIP LOCKED)
RETURNING``; on PostgreSQL ``id = ANY(ARRAY(SELECT …))``, which finds each picked row by its
key where ``IN`` let the planner scan the whole table, as Stator's own claim does since
2026-11-27), one statement writes them all back, each fenced on the lease it was claimed
with (PostgreSQL: ``UPDATE … FROM unnest(…)``; SQLite: ``executemany`` of the fenced UPDATE
inside ``BEGIN IMMEDIATE``).  Each statement is its own transaction.  Whatever Stator does
beyond this is the price of its features; the ratio of the two, measured in one run, is the
headline figure of ``stator bench limit``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import create_engine

from .._store._dialects import dialect_for
from .._time_text import to_sqlite_text
from ._common import Context, Result, result
from ._measure import per_thousand, server_cpu
from ._places import Place

TABLE = "stator_bench_minimal"
LEASE = timedelta(seconds=60)
NEXT = {"first": "second", "second": "third", "third": "done"}


@dataclass
class LoopStats:
    transitions: int = 0
    claims: int = 0
    seconds: float = 0.0
    claim_seconds: float = 0.0
    write_seconds: float = 0.0
    cpu_seconds: float | None = None  # the loop's own process

    @property
    def per_second(self) -> float:
        return self.transitions / self.seconds if self.seconds > 0 else 0.0


def measure(ctx: Context, batch: int) -> Result:
    rows = ctx.sizes.rows
    ctx.progress(f"limit: {rows:,} rows, minimal claim + fenced write-back loop, batch {batch}")
    with ctx.server.place("minimal") as place:
        # The floor writes as Stator's driver does on this database: row by row inside the
        # write lock (SQLite), or each batch as one statement (PostgreSQL).
        sqlite = dialect_for(place.backend).row_by_row_writes
        fill = _fill_sqlite if sqlite else _fill_postgres
        with _connection(place) as conn:
            fill(conn, rows)
            with server_cpu(ctx.monitor, place.app_name) as db_cpu:
                if db_cpu is not None:
                    db_cpu.start()
                stats = (_drive_sqlite if sqlite else _drive_postgres)(conn, batch)
                if db_cpu is not None:
                    db_cpu.stop()
    return result(
        "limit", ctx.backend, loop="minimal", batch_size=batch, rows=rows,
        transitions=stats.transitions, complete=stats.transitions == rows * 3,
        seconds=stats.seconds, transitions_per_second=stats.per_second,
        claim_ms=stats.claim_seconds / max(stats.claims, 1) * 1000,
        write_ms=stats.write_seconds / max(stats.claims, 1) * 1000,
        loop_cpu_s_per_1000=per_thousand(stats.cpu_seconds, stats.transitions),
        db_cpu_s_per_1000=per_thousand(db_cpu.backends if db_cpu else None, stats.transitions),
    )


@contextmanager
def _connection(place: Place) -> Iterator[Any]:
    """A bare DBAPI connection in autocommit mode (each statement its own transaction)."""
    if dialect_for(place.backend).database_is_file:
        path = place.url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA busy_timeout = 10000")
        try:
            yield conn
        finally:
            conn.close()
        return
    engine = create_engine(place.url)
    try:
        raw = engine.raw_connection()
        try:
            driver: Any = raw.driver_connection
            driver.autocommit = True
            yield driver
        finally:
            raw.close()
    finally:
        engine.dispose()


def _fill_postgres(conn: Any, rows: int) -> None:
    conn.execute(
        f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, state text NOT NULL, "
        "state_next timestamptz, state_changed timestamptz NOT NULL)"
    )
    conn.execute(f"CREATE INDEX {TABLE}_due ON {TABLE} (state_next) WHERE state_next IS NOT NULL")
    conn.execute(
        f"INSERT INTO {TABLE} SELECT g, 'first', now() - interval '1 minute', now() "
        "FROM generate_series(1, %s) AS g", (rows,),
    )
    conn.execute(f"VACUUM ANALYZE {TABLE}")


def _fill_sqlite(conn: sqlite3.Connection, rows: int) -> None:
    conn.execute(
        f"CREATE TABLE {TABLE} (id INTEGER PRIMARY KEY, state TEXT NOT NULL, "
        "state_next TEXT, state_changed TEXT NOT NULL)"
    )
    conn.execute(f"CREATE INDEX {TABLE}_due ON {TABLE} (state_next) WHERE state_next IS NOT NULL")
    due = to_sqlite_text(datetime.now(UTC) - timedelta(minutes=1))
    conn.execute(
        f"WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < ?) "
        f"INSERT INTO {TABLE} SELECT g, 'first', ?, ? FROM n", (rows, due, due),
    )
    conn.execute(f"ANALYZE {TABLE}")


def _drive_postgres(conn: Any, batch: int) -> LoopStats:
    claim = (
        f"UPDATE {TABLE} SET state_next = %(lease)s WHERE id = ANY(ARRAY(SELECT id FROM {TABLE} "
        "WHERE state_next <= %(now)s ORDER BY state_next LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
        ") RETURNING id, state, state_next"
    )
    write = (
        f"UPDATE {TABLE} AS t SET state = v.state, state_next = v.next, "
        "state_changed = %(now)s FROM unnest(CAST(%(ids)s AS bigint[]), "
        "CAST(%(states)s AS text[]), CAST(%(nexts)s AS timestamptz[]), "
        "CAST(%(leases)s AS timestamptz[])) AS v(id, state, next, lease) "
        "WHERE t.id = v.id AND t.state_next = v.lease"
    )
    stats = LoopStats()
    cursor = conn.cursor()
    cpu0, began = time.process_time(), time.perf_counter()
    while True:
        now = datetime.now(UTC)
        t0 = time.perf_counter()
        cursor.execute(claim, {"lease": now + LEASE, "now": now, "limit": batch})
        claimed = cursor.fetchall()
        t1 = time.perf_counter()
        stats.claim_seconds += t1 - t0
        if not claimed:
            break
        stats.claims += 1
        states = [NEXT[state] for _, state, _ in claimed]
        cursor.execute(write, {
            "now": now, "ids": [pk for pk, _, _ in claimed], "states": states,
            "nexts": [None if s == "done" else now for s in states],
            "leases": [lease for _, _, lease in claimed],
        })
        stats.write_seconds += time.perf_counter() - t1
        stats.transitions += cursor.rowcount
    stats.seconds = time.perf_counter() - began
    stats.cpu_seconds = time.process_time() - cpu0
    return stats


def _drive_sqlite(conn: sqlite3.Connection, batch: int) -> LoopStats:
    claim = (
        f"UPDATE {TABLE} SET state_next = ? WHERE id IN (SELECT id FROM {TABLE} "
        "WHERE state_next <= ? ORDER BY state_next LIMIT ?) RETURNING id, state, state_next"
    )
    write = (
        f"UPDATE {TABLE} SET state = ?, state_next = ?, state_changed = ? "
        "WHERE id = ? AND state_next = ?"
    )
    stats = LoopStats()
    cpu0, began = time.process_time(), time.perf_counter()
    while True:
        now = datetime.now(UTC)
        stamp, lease = to_sqlite_text(now), to_sqlite_text(now + LEASE)
        t0 = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        claimed = conn.execute(claim, (lease, stamp, batch)).fetchall()
        conn.execute("COMMIT")
        t1 = time.perf_counter()
        stats.claim_seconds += t1 - t0
        if not claimed:
            break
        stats.claims += 1
        params = []
        for pk, state, fence in claimed:
            after = NEXT[state]
            params.append((after, None if after == "done" else stamp, stamp, pk, fence))
        conn.execute("BEGIN IMMEDIATE")
        written = conn.executemany(write, params).rowcount
        conn.execute("COMMIT")
        stats.write_seconds += time.perf_counter() - t1
        stats.transitions += written
    stats.seconds = time.perf_counter() - began
    stats.cpu_seconds = time.process_time() - cpu0
    return stats
