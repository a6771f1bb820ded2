"""Scenario 2, the database's own limit.  First the minimal loop (``_minimal``: the floor,
no Stator code at all); then Stator's claim and fenced write-back statements, word for word
(``TrackedModel.sql``), driven by the smallest loop that can drive them.

No engine, no ORM, no handler, no threads: one DBAPI connection claims a batch (one
transaction), builds the write-back payload the way ``Store._payload`` does, writes it (a
second transaction, ``BEGIN IMMEDIATE`` on SQLite like the engine), and goes again until
nothing is due.  The engine's throughput divided by this loop's, at the same batch size, is
the share of what Stator's own SQL allows; the engine's throughput divided by the minimal
loop's is the headline figure (``engine_vs_limit`` on the ``minimal`` line).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import Engine, create_engine, text

from .._store import Store
from .._store._dialects import dialect_for
from . import _minimal
from ._common import Context, Result, bench_rows, best, result
from ._minimal import LoopStats
from ._models import NEXT_STATE, BenchRow
from ._throughput import measure as engine_throughput


def run(ctx: Context) -> list[Result]:
    """The minimal loop (the floor), then Stator's own statements in the same kind of loop,
    then the engine's ratio to each, all from this run."""
    minimal = [
        best(ctx.sizes.repeats, partial(_minimal.measure, ctx, batch), "transitions_per_second")
        for batch in ctx.sizes.limit_batches
    ]
    ours = [
        best(ctx.sizes.repeats, partial(_limit, ctx, batch), "transitions_per_second")
        for batch in ctx.sizes.limit_batches
    ]
    out: list[Result] = []
    engine = ctx.earlier("throughput", processes=1, rows=ctx.sizes.rows, objects="orm")
    if engine is None:
        engine = engine_throughput(ctx, 1)
        out.append(engine)
    for line in minimal + ours:
        if line["batch_size"] == ctx.batch_size:
            line["engine_transitions_per_second"] = engine["transitions_per_second"]
            line["engine_vs_limit"] = round(
                engine["transitions_per_second"] / line["transitions_per_second"], 3
            )
            line["engine_worker_cpu_s_per_1000"] = engine.get("worker_cpu_s_per_1000")
            line["engine_db_cpu_s_per_1000"] = engine.get("db_cpu_s_per_1000")
    return out + minimal + ours


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
        "limit", ctx.backend, loop="stator-sql", batch_size=batch, rows=rows,
        transitions=stats.transitions,
        complete=stats.transitions == rows * 3, seconds=stats.seconds,
        transitions_per_second=stats.per_second,
        claim_ms=stats.claim_seconds / max(stats.claims, 1) * 1000,
        write_ms=stats.write_seconds / max(stats.claims, 1) * 1000,
    )


def drive(engine: Engine, batch: int) -> LoopStats:
    """Claim and write back ``BenchRow`` rows until none is due; one connection."""
    store = Store(engine, [BenchRow])  # for the statements and SQLite's settings only
    tracked = store.tracked[0]
    claim = _driver_sql(engine, tracked.sql.claim or "")
    write = _driver_sql(engine, tracked.sql.write)
    leases = [
        (f"lease_{i}", timedelta(seconds=state.lease))
        for i, state in enumerate(tracked.graph.scheduled_states())
    ]
    columns = [c.name for c in tracked.table.c]
    pk, state, fence = columns.index(tracked.pk), columns.index("state"), columns.index(
        "state_next"
    )
    ts, ts_json = store.dialect.ts, store.dialect.ts_json
    begin = store.dialect.begin_for_writes
    fence_as_text = store.dialect.times_as_text
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
            claimed = _transaction(raw, cursor, begin, claim, params)
            t1 = time.perf_counter()
            stats.claim_seconds += t1 - t0
            if not claimed:
                break
            stats.claims += 1
            changed, iso = ts_json(now), now.isoformat()
            params = store.dialect.batch_params([
                {
                    "pk": row[pk], "fence_state": row[state],
                    "fence": row[fence] if fence_as_text else row[fence].isoformat(),
                    "state": NEXT_STATE[row[state]], "changed": changed,
                    "next": None if NEXT_STATE[row[state]] == "done" else changed,
                    "attempts": 0, "moved": True, "changed_iso": iso,
                }
                for row in claimed
            ])
            applied = _transaction(raw, cursor, begin, write, params)
            stats.write_seconds += time.perf_counter() - t1
            stats.transitions += len(applied)
        stats.seconds = time.perf_counter() - began
    finally:
        raw.close()
    return stats


def _driver_sql(engine: Engine, sql: str) -> str:
    """The statement in the driver's own parameter style (SQLite takes ``:name`` as is)."""
    if dialect_for(engine).named_params:
        return sql
    return str(text(sql).compile(dialect=engine.dialect))


def _transaction(
    raw: Any, cursor: Any, begin: str | None, sql: str, params: dict[str, Any]
) -> list[Any]:
    if begin is not None:
        cursor.execute(begin)
    cursor.execute(sql, params)
    rows: list[Any] = cursor.fetchall()
    raw.commit()
    return rows
