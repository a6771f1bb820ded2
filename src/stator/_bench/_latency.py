"""Scenario 3, latency: from the application's commit of a transition to its handler's start.

Rows wait in an externally progressed state.  The application moves one at a time with
``transition_perform`` and commits, a few tens of milliseconds apart (light load: the worker
is idle each time, so what is measured is how fast an idle worker notices); the handler's
first act is to note the time in the row.  Latency = handler start - the moment ``commit()``
returned in the application (both clocks are this machine's).

Modes: ``same-process`` (the worker in a thread of the application's process: woken by the
in-process signal, and on PostgreSQL also by NOTIFY) and ``cross-process`` (the worker in a
process of its own: NOTIFY on PostgreSQL, the ``PRAGMA data_version`` poll on SQLite).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from .._stator import Stator
from .._store._dialects import dialect_for
from ..errors import TransitionConflict
from ._child import BenchError, ChildSpec, children
from ._common import Context, Result, result
from ._measure import percentiles
from ._models import LatencyRow, LatencyStates
from ._places import Place, insert_rows

WARMUP = 3  # first transitions, not counted: connections, prepared statements, caches
MODES = ("same-process", "cross-process")


def run(ctx: Context) -> list[Result]:
    return [_measure(ctx, mode) for mode in MODES]


def _measure(ctx: Context, mode: str) -> Result:
    samples = ctx.sizes.latency_samples
    ctx.progress(f"latency: {samples} transitions, worker {mode}")
    with ctx.server.place("latency") as place:
        stator = Stator(place.url, [LatencyRow])
        try:
            stator.migrate()
            insert_rows(stator.engine, LatencyRow.__tablename__, 1, samples + WARMUP)
            with _worker(ctx, place, stator, mode):
                committed = _transitions(ctx, stator, samples + WARMUP)
                started = _handler_starts(stator, samples + WARMUP)
        finally:
            stator.dispose()
    millis = [
        (started[i] - committed[i]) * 1000 for i in range(WARMUP + 1, samples + WARMUP + 1)
    ]
    figures = {f"{k}_ms": v for k, v in percentiles(millis).items()}
    dialect = dialect_for(ctx.backend)
    wake = dialect.wake_up
    if mode == "same-process":
        wake = "in-process signal" + (" + NOTIFY" if dialect.listen_notify else "")
    return result("latency", ctx.backend, mode=mode, wake_up=wake, samples=samples, **figures)


@contextmanager
def _worker(ctx: Context, place: Place, stator: Stator, mode: str) -> Iterator[None]:
    """A running, idle worker: in a thread here, or in a process of its own."""
    if mode == "same-process":
        worker = stator.worker(concurrency=ctx.concurrency)
        thread = threading.Thread(target=worker.run, name="bench-latency-worker")
        thread.start()
        time.sleep(0.5)  # its listener is up
        try:
            yield
        finally:
            worker.stop()
            thread.join()
            _join_listeners()
        return
    spec = ChildSpec(url=place.url, mode="serve", models=["LatencyRow"],
                     concurrency=ctx.concurrency, batch_size=ctx.batch_size)
    with children([spec], ctx.folder) as (child,):
        child.send("go")
        child.expect("serving", timeout=30)
        yield
        child.send("stop")
        child.expect("result", timeout=30)
        child.finish()


def _join_listeners(timeout: float = 3.0) -> None:
    """Wait for the stopped worker's wake-up listener to notice the stop: ``Worker.run``
    returns without joining it, and the database it listens on is about to be dropped
    (which it would log as an outage)."""
    for thread in threading.enumerate():
        if thread.name == "stator-listener":
            thread.join(timeout)


def _transitions(ctx: Context, stator: Stator, count: int) -> dict[int, float]:
    """Move rows 1..count to ``go`` one at a time; when each commit returned (epoch s)."""
    committed: dict[int, float] = {}
    low, high = ctx.sizes.latency_gap
    for pk in range(1, count + 1):
        committed[pk] = _move(stator, pk)
        time.sleep(random.uniform(low, high))
    return committed


def _move(stator: Stator, pk: int, patience: float = 10.0) -> float:
    """The application's side: read the row, move it, commit; when the commit returned.

    On SQLite a read transaction cannot write once another connection (the worker claiming
    or writing back, say) has committed since it began reading, nor while that connection
    holds the write lock: ``TransitionConflict``, and the application does what it says,
    tries again in a new transaction.  It pauses a little longer each time, as an
    application should: on a loaded machine the worker's write can hold the lock for tens
    of milliseconds, and back-to-back tries would all fall inside it.
    """
    deadline = time.monotonic() + patience
    pause = 0.001
    while True:
        with Session(stator.engine) as session:
            row = session.get(LatencyRow, pk)
            assert row is not None
            try:
                row.transition_perform(LatencyStates.go)
            except TransitionConflict:
                session.rollback()
            else:
                session.commit()
                return time.time()
        if time.monotonic() >= deadline:
            raise BenchError(f"latency: row {pk} could not be moved in {patience:g} s")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _handler_starts(stator: Stator, count: int, timeout: float = 60.0) -> dict[int, float]:
    """Wait until every row is done; when each row's handler started (epoch s)."""
    deadline = time.monotonic() + timeout
    table = LatencyRow.__table__
    with Session(stator.engine) as session:
        while True:
            done = session.scalar(
                select(func.count()).select_from(table).where(table.c.state == "done")
            )
            session.rollback()
            if done == count:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"latency: only {done} of {count} rows done after {timeout}s")
            time.sleep(0.05)
        rows = session.execute(select(table.c.id, table.c.started_at)).all()
    return {pk: started for pk, started in rows}
