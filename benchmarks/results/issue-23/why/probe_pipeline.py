"""One plain-rows drain (as prof_drain.py: concurrency 4, batch 100) with the pipeline's
hand-offs counted from outside (methods wrapped, nothing in src/ changed): rows per claim,
slices per claim and rows per slice, the handlers' timed average (which sets the slice size),
handler wall time against handler CPU time, rows per write-back, the handler queue's depth
when a claim is dispatched, and how long the coordinator waited on its claim thread.

    python probe_pipeline.py ROWS [plain] [CONCURRENCY] [BATCH]
"""

from __future__ import annotations

import collections
import os
import statistics
import sys
import time

from sqlalchemy import create_engine, text

from stator._bench._models import BenchPlainRow, BenchRow
from stator._bench._places import insert_rows
from stator._stator import Stator
from stator._worker import _db_steps, _handlers, _writer
from stator._worker._slices import slice_size

URL = "postgresql+psycopg://postgres@127.0.0.1:5432/"
DB = "why23_probe"
claims: list[int] = []
slices: list[int] = []
averages: list[float] = []
backlog_at_dispatch: list[int] = []
writes: list[int] = []
handler_wall: list[float] = []
handler_cpu: list[float] = []
step_wait: list[float] = []
kinds: collections.Counter[str] = collections.Counter()

orig_dispatch = _handlers.HandlerPool.dispatch
orig_run_one = _handlers.HandlerPool._run_one
orig_flush = _writer.Writer.flush
orig_step = _db_steps.DatabaseSteps.run


def dispatch(self, tasks):  # type: ignore[no-untyped-def]
    if tasks:
        claims.append(len(tasks))
        backlog_at_dispatch.append(self.backlog)
        timed = self.timing.measured >= self._options.concurrency
        averages.append(self.timing.average if timed else float("nan"))
        size = slice_size(len(tasks), self._options.concurrency, timed, self.timing.average)
        slices.extend(min(size, len(tasks) - i) for i in range(0, len(tasks), size))
    return orig_dispatch(self, tasks)


def run_one(self, task, thread):  # type: ignore[no-untyped-def]
    w0, c0 = time.perf_counter(), time.thread_time()
    try:
        return orig_run_one(self, task, thread)
    finally:
        handler_wall.append(time.perf_counter() - w0)
        handler_cpu.append(time.thread_time() - c0)


def flush(self):  # type: ignore[no-untyped-def]
    if self._pending:
        writes.append(sum(len(w) for w in self._pending.values()))
    return orig_flush(self)


def step(self, action, what="the database"):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    try:
        return orig_step(self, action, what)
    finally:
        step_wait.append(time.perf_counter() - t0)
        kinds[what] += 1


_handlers.HandlerPool.dispatch = dispatch  # type: ignore[method-assign]
_handlers.HandlerPool._run_one = run_one  # type: ignore[method-assign]
_writer.Writer.flush = flush  # type: ignore[method-assign]
_db_steps.DatabaseSteps.run = step  # type: ignore[method-assign]


def q(values: list[float], scale: float = 1.0) -> str:
    if not values:
        return "-"
    v = sorted(x * scale for x in values if x == x)
    if not v:
        return "-"
    return (f"n={len(v)} mean={statistics.fmean(v):.1f} p10={v[len(v) // 10]:.1f} "
            f"p50={v[len(v) // 2]:.1f} p90={v[len(v) * 9 // 10]:.1f} max={v[-1]:.1f}")


def main() -> None:
    rows = int(sys.argv[1])
    rest = sys.argv[2:]
    plain = bool(rest) and rest[0] == "plain"
    rest = rest[1:] if plain else rest
    conc = int(rest[0]) if rest else 4
    batch = int(rest[1]) if len(rest) > 1 else 100
    model = BenchPlainRow if plain else BenchRow
    admin = create_engine(URL + "postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {DB}"))
        conn.execute(text(f"CREATE DATABASE {DB}"))
    admin.dispose()
    url = URL + DB
    setup = Stator(url, [model])
    setup.migrate()
    insert_rows(setup.engine, model.__tablename__, 1, rows)
    setup.dispose()
    stator = Stator(url, [model], concurrency=conc, batch_size=batch)
    with stator.engine.connect():
        pass
    began = time.perf_counter()
    moved = stator.worker(until_idle=True, idle_window=0.0).run().transitions
    seconds = time.perf_counter() - began
    stator.dispose()
    print(f"model={model.__name__} concurrency={conc} batch={batch} transitions={moved} "
          f"s={seconds:.2f} tps={moved / seconds:.0f} load_1m={os.getloadavg()[0]:.2f}")
    print(f"rows per claim: {q(claims)}")
    print(f"handler queue backlog when a claim is dispatched: {q(backlog_at_dispatch)}")
    print(f"slices: {len(slices)} ({len(slices) / moved * 1000:.1f} per 1000 rows); "
          f"rows per slice: {q(slices)}")
    print(f"handlers' timed average at dispatch, us: {q(averages, 1e6)}")
    print(f"handler wall time per row, us: {q(handler_wall, 1e6)}")
    print(f"handler thread CPU per row, us: {q(handler_cpu, 1e6)}")
    print(f"rows per write-back: {q(writes)}")
    print(f"coordinator waiting on a database step, ms: {q(step_wait, 1e3)} {dict(kinds)}")


if __name__ == "__main__":
    main()
