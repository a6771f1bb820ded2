"""Measure one Python peer job system once, in a process of its own.

run.py starts this script with the peers' virtualenv python, one process per system and
variant, so that each measurement gets a fresh interpreter and event loop, so that a hung
peer can be killed by its process group without harming the others, and so that no peer's
imports leak into another's timing. The job store (a throwaway PostgreSQL database or SQLite
file) is made and removed by run.py; this script only fills it, runs one worker over it and
reports what it saw.

Usage: measure.py SYSTEM --target DSN_OR_PATH --jobs N --settings JSON

Prints one JSON object to stdout:
    {"version", "enqueue_seconds", "seconds", "completed", "remaining"}
where ``seconds`` runs from the worker's start until all jobs are completed, ``completed``
counts executions of the no-op task and ``remaining`` counts jobs the store still holds as
not done. run.py decides from those two counts whether the run counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib.metadata import version
from typing import Any

ENQUEUE_CHUNK = 5_000  # rows per bulk-enqueue call: one statement each, bounded parameter lists


@dataclass
class Measurement:
    """What one child run reports back to run.py."""

    version: str
    enqueue_seconds: float
    seconds: float
    completed: int
    remaining: int


def chunks(total: int, size: int = ENQUEUE_CHUNK) -> list[int]:
    """Split ``total`` jobs into bulk-enqueue batch sizes."""
    return [min(size, total - start) for start in range(0, total, size)]


# --- pgqueuer ---------------------------------------------------------------------------------


async def measure_pgqueuer(dsn: str, jobs: int, settings: dict[str, Any]) -> Measurement:
    """Bulk-enqueue with Queries.enqueue(lists), then time one QueueManager in drain mode.

    Drain mode returns once the queue is empty and the completion log buffer is flushed, so
    the measured span ends when every job is durably marked done, not merely executed.
    """
    import asyncpg
    from pgqueuer import PgQueuer
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.domain.types import QueueExecutionMode
    from pgqueuer.models import Job
    from pgqueuer.queries import Queries

    connection = await asyncpg.connect(dsn)
    try:
        queries = Queries(AsyncpgDriver(connection))
        await queries.install()
        started = time.perf_counter()
        for size in chunks(jobs):
            await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
        enqueue_seconds = time.perf_counter() - started

        worker_connection = await asyncpg.connect(dsn)
        try:
            pgq = PgQueuer(AsyncpgDriver(worker_connection))
            completed = 0

            @pgq.entrypoint("noop")
            async def noop(job: Job) -> None:
                nonlocal completed
                completed += 1

            started = time.perf_counter()
            await pgq.qm.run(mode=QueueExecutionMode.drain, **settings)
            seconds = time.perf_counter() - started
        finally:
            await worker_connection.close()

        remaining = await connection.fetchval("SELECT count(*) FROM pgqueuer")
        return Measurement(version("pgqueuer"), enqueue_seconds, seconds, completed, remaining)
    finally:
        await connection.close()


# --- procrastinate ----------------------------------------------------------------------------


async def measure_procrastinate(dsn: str, jobs: int, settings: dict[str, Any]) -> Measurement:
    """Bulk-enqueue with Task.batch_defer_async, then time run_worker_async(wait=False).

    ``wait=False`` makes the worker return as soon as it has caught up with the queue, which
    is exactly "all jobs completed"; each job's completion is written by the worker before
    it fetches the next, so nothing is left buffered when it returns.
    """
    import procrastinate

    pool_size = max(4, int(settings.get("concurrency", 1)) + 2)
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=dsn, min_size=2, max_size=pool_size)
    )
    completed = 0

    @app.task(name="noop")
    async def noop() -> None:
        nonlocal completed
        completed += 1

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        started = time.perf_counter()
        for size in chunks(jobs):
            await noop.batch_defer_async(*({} for _ in range(size)))
        enqueue_seconds = time.perf_counter() - started

        started = time.perf_counter()
        await app.run_worker_async(wait=False, install_signal_handlers=False, **settings)
        seconds = time.perf_counter() - started

        rows = await app.connector.execute_query_one_async(
            "SELECT count(*) AS n FROM procrastinate_jobs WHERE status <> 'succeeded'"
        )
    return Measurement(version("procrastinate"), enqueue_seconds, seconds, completed, rows["n"])


# --- huey -------------------------------------------------------------------------------------


def measure_huey(path: str, jobs: int, settings: dict[str, Any]) -> Measurement:
    """Enqueue by calling the task N times, then time a consumer until the task ran N times.

    Huey has no bulk enqueue; calling the task is its documented way to enqueue (untimed
    here anyway). The consumer runs in this process with thread workers (huey's default
    worker type), so an in-process counter sees every execution. Huey deletes a task's row
    when it dequeues it, so the queue is empty once the counter reaches N.
    """
    from huey import SqliteHuey

    storage = {key: settings.pop(key) for key in ("fsync", "journal_mode") if key in settings}
    huey = SqliteHuey("peers", filename=path, **storage)
    done = threading.Event()
    lock = threading.Lock()
    completed = 0

    @huey.task()
    def noop() -> None:
        nonlocal completed
        with lock:
            completed += 1
            if completed >= jobs:
                done.set()

    started = time.perf_counter()
    for _ in range(jobs):
        noop()
    enqueue_seconds = time.perf_counter() - started

    consumer = huey.create_consumer(**settings)
    started = time.perf_counter()
    consumer.start()
    done.wait()
    seconds = time.perf_counter() - started
    consumer.stop(graceful=True)
    return Measurement(version("huey"), enqueue_seconds, seconds, completed, huey.pending_count())


MEASURES: dict[str, Callable[[str, int, dict[str, Any]], Any]] = {
    "pgqueuer": measure_pgqueuer,
    "procrastinate": measure_procrastinate,
    "huey": measure_huey,
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Read the child's arguments; run.py is the only intended caller."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("system", choices=sorted(MEASURES))
    parser.add_argument("--target", required=True, help="PostgreSQL DSN, or SQLite path (huey)")
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--settings", default="{}", help="JSON keyword arguments for the worker")
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    """Run the chosen measurement and print its JSON line."""
    args = parse_args(argv)
    settings = json.loads(args.settings)
    result = MEASURES[args.system](args.target, args.jobs, settings)
    if asyncio.iscoroutine(result):
        result = asyncio.run(result)
    print(json.dumps(asdict(result)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
