"""Scenario 2, the database's own limit: Stator's claim and fenced write-back statements,
word for word (``TrackedModel.sql``), driven by the smallest loop that can drive them.

No engine, no ORM, no handler, no threads: one DBAPI connection claims a batch (one
transaction), builds the write-back payload the way ``Store._payload`` does, writes it (a
second transaction, ``BEGIN IMMEDIATE`` on SQLite like the engine), and goes again until
nothing is due.  The engine's throughput divided by this loop's, at the same batch size, is
the headline figure: the share of what the database allows that the engine delivers.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import Engine, create_engine, text

from .._store import Store
from ._common import Context, Result, bench_rows, best, result
from ._models import NEXT_STATE, BenchRow
from ._throughput import measure as engine_throughput


@dataclass
class LoopStats:
    transitions: int = 0
    claims: int = 0
    seconds: float = 0.0
    claim_seconds: float = 0.0
    write_seconds: float = 0.0

    @property
    def per_second(self) -> float:
        return self.transitions / self.seconds if self.seconds > 0 else 0.0


def run(ctx: Context) -> list[Result]:
    found = [
        best(ctx.sizes.repeats, partial(_limit, ctx, batch), "transitions_per_second")
        for batch in ctx.sizes.limit_batches
    ]
    out: list[Result] = []
    engine = ctx.earlier("throughput", processes=1, rows=ctx.sizes.rows)
    if engine is None:
        engine = engine_throughput(ctx, 1)
        out.append(engine)
    for line in found:
        if line["batch_size"] == ctx.batch_size:
            line["engine_transitions_per_second"] = engine["transitions_per_second"]
            line["engine_vs_limit"] = round(
                engine["transitions_per_second"] / line["transitions_per_second"], 3
            )
    return out + found


def _limit(ctx: Context, batch: int) -> Result:
    rows = ctx.sizes.rows
    ctx.progress(f"limit: {rows:,} rows, raw claim + write-back loop, batch {batch}")
    with ctx.server.place("limit") as place, bench_rows(place, rows):
        engine = create_engine(place.url)
        try:
            stats = drive(engine, batch)
        finally:
            engine.dispose()
    return result(
        "limit", ctx.backend, batch_size=batch, rows=rows, transitions=stats.transitions,
        complete=stats.transitions == rows * 3, seconds=stats.seconds,
        transitions_per_second=stats.per_second,
        claim_ms=stats.claim_seconds / max(stats.claims, 1) * 1000,
        write_ms=stats.write_seconds / max(stats.claims, 1) * 1000,
    )


def drive(engine: Engine, batch: int) -> LoopStats:
    """Claim and write back ``BenchRow`` rows until none is due; one connection."""
    store = Store(engine, [BenchRow])  # for the statements and SQLite's settings only
    tracked = store.tracked[0]
    claim = _driver_sql(engine, tracked.sql["claim"])
    write = _driver_sql(engine, tracked.sql["write"])
    leases = [
        (f"lease_{i}", timedelta(seconds=state.lease))
        for i, state in enumerate(tracked.graph.scheduled_states())
    ]
    columns = [c.name for c in tracked.table.c]
    pk, state, fence = columns.index(tracked.pk), columns.index("state"), columns.index(
        "state_next"
    )
    ts, ts_json = store.dialect.ts, store.dialect.ts_json
    sqlite = engine.dialect.name == "sqlite"
    stats = LoopStats()
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        began = time.perf_counter()
        while True:
            now = datetime.now(UTC)
            params: dict[str, Any] = {"now": ts(now), "limit": batch}
            params.update({name: ts(now + lease) for name, lease in leases})
            t0 = time.perf_counter()
            claimed = _transaction(raw, cursor, sqlite, claim, params)
            t1 = time.perf_counter()
            stats.claim_seconds += t1 - t0
            if not claimed:
                break
            stats.claims += 1
            changed, iso = ts_json(now), now.isoformat()
            payload = json.dumps([
                {
                    "pk": row[pk], "fence_state": row[state],
                    "fence": row[fence] if sqlite else row[fence].isoformat(),
                    "state": NEXT_STATE[row[state]], "changed": changed,
                    "next": None if NEXT_STATE[row[state]] == "done" else changed,
                    "attempts": 0, "moved": True, "changed_iso": iso,
                }
                for row in claimed
            ])
            applied = _transaction(raw, cursor, sqlite, write, {"payload": payload})
            stats.write_seconds += time.perf_counter() - t1
            stats.transitions += len(applied)
        stats.seconds = time.perf_counter() - began
    finally:
        raw.close()
    return stats


def _driver_sql(engine: Engine, sql: str) -> str:
    """The statement in the driver's own parameter style (SQLite takes ``:name`` as is)."""
    if engine.dialect.name == "sqlite":
        return sql
    return str(text(sql).compile(dialect=engine.dialect))


def _transaction(
    raw: Any, cursor: Any, sqlite: bool, sql: str, params: dict[str, Any]
) -> list[Any]:
    if sqlite:
        cursor.execute("BEGIN IMMEDIATE")
    cursor.execute(sql, params)
    rows: list[Any] = cursor.fetchall()
    raw.commit()
    return rows
