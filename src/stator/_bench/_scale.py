"""Scenario 5, scale: the claim + write-back loop of the limit scenario, with a small number
of due rows in tables of 10 thousand to 10 million rows.

The rest of each table is finished work (a terminal state, ``state_next`` NULL), which the
partial claim index leaves out, so the cost per claim must not depend on the table's size.
The same table grows from one size to the next (bulk INSERT … SELECT of terminal rows); the
due rows are the newest ones (the highest ids), as new work is in a live system, so every
size touches the same number of table pages and only the table's size differs.  Planner
statistics are refreshed after each growth.  On PostgreSQL autovacuum is off for the table
and a VACUUM runs before each pass instead (see ``hold_vacuum``), so every size starts clean.
Each size is measured ``REPEATS`` times, the best kept, so a burst of other activity on the
machine does not pass for a slope.
"""

from __future__ import annotations

import time

from sqlalchemy import create_engine

from .._stator import Stator
from ._common import Context, Result, result
from ._limit import drive
from ._models import BenchRow
from ._places import analyze, hold_vacuum, insert_rows, make_due, vacuum

BATCH = 100
REPEATS = 3


def run(ctx: Context) -> list[Result]:
    out: list[Result] = []
    table = BenchRow.__tablename__
    with ctx.server.place("scale") as place:
        stator = Stator(place.url, [BenchRow])
        stator.migrate()
        hold_vacuum(stator.engine, table)
        engine = create_engine(place.url)
        try:
            present = 0
            for size in sorted(ctx.sizes.scale_sizes):
                began = time.perf_counter()
                ctx.progress(f"scale: growing the table to {size:,} rows")
                insert_rows(stator.engine, table, present + 1, size - present, terminal="done")
                present = size
                analyze(stator.engine, table)
                fill_seconds = time.perf_counter() - began
                due = min(ctx.sizes.scale_due, size)
                ctx.progress(f"scale: {due:,} due among {size:,} rows")
                best = None
                for _ in range(REPEATS):
                    make_due(stator.engine, table, range(size - due + 1, size + 1), "first")
                    vacuum(stator.engine, table)
                    stats = drive(engine, BATCH)
                    if best is None or stats.per_second > best.per_second:
                        best = stats
                assert best is not None
                out.append(result(
                    "scale", ctx.backend, table_rows=size, due_rows=due, batch_size=BATCH,
                    transitions=best.transitions, complete=best.transitions == due * 3,
                    transitions_per_second=best.per_second,
                    claim_ms=best.claim_seconds / max(best.claims, 1) * 1000,
                    write_ms=best.write_seconds / max(best.claims, 1) * 1000,
                    fill_seconds=fill_seconds,
                ))
        finally:
            engine.dispose()
            stator.dispose()
    _flatness(out)
    return out


def _flatness(lines: list[Result]) -> None:
    """Each size's throughput relative to the smallest table's (1.0 = the same)."""
    if not lines:
        return
    base = lines[0]["transitions_per_second"] or 1.0
    for line in lines:
        line["vs_smallest"] = round(line["transitions_per_second"] / base, 3)
