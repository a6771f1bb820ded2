"""Scenario 1, throughput: N rows through three no-op steps, by 1, 2, 4… worker processes.

Each worker is a real process (``python -m stator._bench._child``) running the same
``Worker`` as ``stator run --until-idle``; all start on one signal, and the time is from that
signal to the last worker's end.  Reported per worker count: transitions per second, CPU
seconds per 1,000 transitions of the workers and (PostgreSQL) of the server, peak RSS.
"""

from __future__ import annotations

from typing import Any

from ._child import ChildSpec, children
from ._common import Context, Result, bench_rows, best, result
from ._measure import ServerCpu, per_thousand, server_cpu


def run(ctx: Context) -> list[Result]:
    return [measure(ctx, processes) for processes in ctx.sizes.processes]


def measure(ctx: Context, processes: int) -> Result:
    """The best of ``sizes.repeats`` runs with this many worker processes."""
    return best(ctx.sizes.repeats, lambda: _once(ctx, processes), "transitions_per_second")


def _once(ctx: Context, processes: int) -> Result:
    rows = ctx.sizes.rows
    ctx.progress(f"throughput: {rows:,} rows, {processes} worker process(es)")
    with ctx.server.place("throughput") as place, bench_rows(place, rows):
        spec = ChildSpec(
            url=place.url, mode="drain", models=["BenchRow"],
            concurrency=ctx.concurrency, batch_size=ctx.batch_size,
        )
        with children([spec] * processes, ctx.folder) as workers, \
                server_cpu(ctx.monitor, place.app_name) as db_cpu:
            if db_cpu is not None:
                db_cpu.start()
            for worker in workers:
                worker.send("go")
            timeout = 120 + rows * 3 / 500
            reports = [w.expect("result", timeout)["result"] for w in workers]
            if db_cpu is not None:
                db_cpu.stop()
            for worker in workers:
                worker.finish()
    return _summarise(ctx, rows, processes, reports, db_cpu)


def _summarise(
    ctx: Context, rows: int, processes: int, reports: list[dict[str, Any]],
    db_cpu: ServerCpu | None,
) -> Result:
    transitions = sum(r["transitions"] for r in reports)
    seconds = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    worker_cpu = sum(r["cpu"] for r in reports)
    return result(
        "throughput", ctx.backend, processes=processes, rows=rows, transitions=transitions,
        complete=transitions == rows * 3, concurrency=ctx.concurrency,
        batch_size=ctx.batch_size, seconds=seconds,
        transitions_per_second=transitions / seconds if seconds > 0 else 0.0,
        worker_cpu_s_per_1000=per_thousand(worker_cpu, transitions),
        db_cpu_s_per_1000=per_thousand(db_cpu.backends if db_cpu else None, transitions),
        db_shared_cpu_s_per_1000=per_thousand(db_cpu.shared if db_cpu else None, transitions),
        statements_per_1000=round(sum(r["statements"] for r in reports) / transitions * 1000, 1)
        if transitions else None,
        peak_rss_mb=max(r["peak_rss_mb"] for r in reports),
    )
