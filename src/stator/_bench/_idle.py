"""Scenario 6, idle cost: what a worker with nothing to do costs, over a minute.

The worker runs in a process of its own against an empty table.  After it settles, its CPU
and the statements it sends (counted by SQLAlchemy in that process) are measured over the
window.  On PostgreSQL the database's own transaction counter (``pg_stat_database``, when the
benchmark has a database of its own) and the server CPU of the worker's connections are
read too.  On SQLite the worker also checks ``PRAGMA data_version`` on a connection of its
own (not SQLAlchemy's): on Linux once a second and after each write to the database's files
(inotify), elsewhere ten times a second; those checks are reported from the engine's
settings, not counted.
"""

from __future__ import annotations

import sys
import time

from .._stator import Stator
from .._store._dialects import dialect_for
from .._worker import SQLITE_POLL, SQLITE_SLOW_POLL
from ._child import ChildSpec, children
from ._common import Context, Result, result
from ._measure import server_cpu, transactions
from ._models import BenchRow

STATS_DELAY = 11.0  # seconds: PostgreSQL 15 flushes an idle backend's statistics every 10 s


def run(ctx: Context) -> list[Result]:
    seconds = ctx.sizes.idle_seconds
    ctx.progress(f"idle: one worker with nothing to do, {seconds:g}s")
    with ctx.server.place("idle") as place:
        stator = Stator(place.url, [BenchRow])
        stator.migrate()
        stator.dispose()
        spec = ChildSpec(url=place.url, mode="idle", models=["BenchRow"],
                         concurrency=ctx.concurrency, batch_size=ctx.batch_size,
                         seconds=seconds, settle=min(2.0, seconds))
        # The database's transaction counter is ours alone only in a database of our own.
        counter = ctx.monitor if place.isolated and place.database else None
        database = place.database or ""
        # A backend reports its transactions to pg_stat_database up to STATS_DELAY late
        # when idle; over a long window, the counter is read that much after the start and
        # after the end (the worker idles on meanwhile), so neither edge is missed.
        delay = STATS_DELAY if counter is not None and seconds >= 30 else 0.0
        spec.settle = max(spec.settle, delay)
        with children([spec], ctx.folder) as (child,), \
                server_cpu(ctx.monitor, place.app_name) as db_cpu:
            child.send("go")
            child.expect("window", timeout=60)
            began = time.perf_counter()
            if db_cpu is not None:
                db_cpu.start()
            xacts = transactions(counter, database) if counter is not None else 0
            child.expect("window", timeout=seconds + 60)
            if db_cpu is not None:
                db_cpu.stop()
            time.sleep(delay)
            if counter is not None:
                xacts = transactions(counter, database) - xacts
            counted = time.perf_counter() - began
            child.send("stop")
            report = child.expect("result", timeout=60)["result"]
            child.finish()
    window = report["seconds"]
    backends = db_cpu.backends if db_cpu is not None else None
    return [result(
        "idle", ctx.backend, seconds=window,
        worker_cpu_percent=report["cpu"] / window * 100,
        queries_per_second=report["statements"] / window,
        db_transactions_per_second=xacts / counted if counter is not None else None,
        db_cpu_percent=None if backends is None else backends / window * 100,
        data_version_checks_per_second=(
            None if dialect_for(ctx.backend).listen_notify
            else 1 / (SQLITE_SLOW_POLL if sys.platform.startswith("linux") else SQLITE_POLL)
        ),
        peak_rss_mb=report["peak_rss_mb"],
    )]
