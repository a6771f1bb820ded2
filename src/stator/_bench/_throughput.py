"""Scenario 1, throughput: N rows through three no-op steps, by 1, 2, 4… worker processes.

Each worker is a real process (``python -m stator._bench._child``) running the same
``Worker`` as ``stator run --until-idle``; all start on one signal, and the time is from that
signal to the last worker's end.  Reported per worker count: transitions per second, CPU
seconds per 1,000 transitions of the workers and (PostgreSQL) of the server, peak RSS.

``objects`` says what the handlers got: ORM objects (``BenchRow``) or, with ``--plain-rows``,
also plain rows (``BenchPlainRow``, measured in turn with the ORM rows' runs, so both see
the same load).
"""

from __future__ import annotations

from typing import Any

from ._child import ChildSpec, children
from ._common import Context, Result, bench_rows, best, best_of, result
from ._measure import ServerCpu, per_thousand, server_cpu
from ._models import STEP_MODELS

KEY = "transitions_per_second"


def run(ctx: Context) -> list[Result]:
    if not ctx.plain_rows:
        return [measure(ctx, processes) for processes in ctx.sizes.processes]
    out = []
    for processes in ctx.sizes.processes:
        found: dict[str, list[Result]] = {objects: [] for objects in STEP_MODELS}
        for _ in range(max(ctx.sizes.repeats, 1)):  # in turn: both kinds see the same load
            for objects, runs in found.items():
                runs.append(_once(ctx, processes, objects))
        out += [best_of(runs, KEY) for runs in found.values()]
    return out


def measure(ctx: Context, processes: int) -> Result:
    """The best of ``sizes.repeats`` runs with this many worker processes (ORM rows)."""
    return best(ctx.sizes.repeats, lambda: _once(ctx, processes), KEY)


def _once(ctx: Context, processes: int, objects: str = "orm") -> Result:
    rows = ctx.sizes.rows
    model = STEP_MODELS[objects]
    ctx.progress(f"throughput: {rows:,} rows, {processes} worker process(es), {objects} rows")
    with ctx.server.place("throughput") as place, bench_rows(place, rows, model):
        spec = ChildSpec(
            url=place.url, mode="drain", models=[model.__name__],
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
    return _summarise(ctx, rows, processes, reports, db_cpu, objects)


def _summarise(
    ctx: Context, rows: int, processes: int, reports: list[dict[str, Any]],
    db_cpu: ServerCpu | None, objects: str,
) -> Result:
    transitions = sum(r["transitions"] for r in reports)
    seconds = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    worker_cpu = sum(r["cpu"] for r in reports)
    return result(
        "throughput", ctx.backend, processes=processes, objects=objects, rows=rows,
        transitions=transitions,
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
