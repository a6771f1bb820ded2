"""Where a claim step's wall time goes, in the engine (plain rows, concurrency 4, batch 100)
and in the stator-sql loop, by wrapping (nothing in src/ changed): the step as the coordinator
waits for it (DatabaseSteps.run), the Worker._claim call on the db-calls thread (wall and that
thread's CPU), inside it Store.claim (wall, CPU), inside that psycopg's Cursor.execute of the
claim statement (wall, CPU: the round trip plus the GIL waits around it), and the rest of
_claim (executor.prepare per row, dispatch).

    python probe_claim.py ROWS [plain] [CONCURRENCY] [BATCH]
"""

from __future__ import annotations

import collections
import os
import statistics
import sys
import threading
import time

import psycopg
from sqlalchemy import create_engine, text

from stator._bench._limit import drive
from stator._bench._models import BenchPlainRow, BenchRow
from stator._bench._places import insert_rows
from stator._stator import Stator
from stator._store import _store
from stator._worker import _coordinator, _db_steps

URL = "postgresql+psycopg://postgres@127.0.0.1:5432/"
DB = "why23_claim"
stats: dict[str, list[float]] = collections.defaultdict(list)
claimed_rows: list[int] = []


def timed(label: str, fn, only_thread: str | None = None):  # type: ignore[no-untyped-def]
    def wrapper(*a, **k):  # type: ignore[no-untyped-def]
        if only_thread and threading.current_thread().name != only_thread:
            return fn(*a, **k)
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            stats[label + " wall"].append(time.perf_counter() - w0)
            stats[label + " cpu"].append(time.thread_time() - c0)
    return wrapper


orig_execute = psycopg.Cursor.execute


def execute(self, query, params=None, **k):  # type: ignore[no-untyped-def]
    q = query if isinstance(query, str) else str(query)
    if "claim_share" not in q:
        return orig_execute(self, query, params, **k)
    w0, c0 = time.perf_counter(), time.thread_time()
    try:
        return orig_execute(self, query, params, **k)
    finally:
        stats["  psycopg execute(claim) wall"].append(time.perf_counter() - w0)
        stats["  psycopg execute(claim) cpu"].append(time.thread_time() - c0)


psycopg.Cursor.execute = execute  # type: ignore[method-assign]


def main() -> None:
    mode, rows = sys.argv[1], int(sys.argv[2])
    rest = sys.argv[3:]
    plain = bool(rest) and rest[0] == "plain"
    rest = rest[1:] if plain else rest
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
    began = time.perf_counter()
    if mode == "engine":
        conc = int(rest[0]) if rest else 4
        batch = int(rest[1]) if len(rest) > 1 else 100
        _db_steps.DatabaseSteps.run = timed("coordinator waits on step", _db_steps.DatabaseSteps.run)
        _coordinator.Worker._claim = timed("Worker._claim (db-calls thread)", _coordinator.Worker._claim)
        _store.Store.claim = timed(" Store.claim", _store.Store.claim)
        stator = Stator(url, [model], concurrency=conc, batch_size=batch)
        with stator.engine.connect():
            pass
        began = time.perf_counter()
        moved = stator.worker(until_idle=True, idle_window=0.0).run().transitions
    else:
        engine = create_engine(url)
        with engine.connect():
            pass
        began = time.perf_counter()
        moved = drive(engine, 100).transitions
    seconds = time.perf_counter() - began
    print(f"mode={mode} model={model.__name__} args={rest} transitions={moved} s={seconds:.2f} "
          f"tps={moved / seconds:.0f} load_1m={os.getloadavg()[0]:.2f}")
    print("per call, ms: mean p50 p90 (n); total per transition, us")
    for label, values in stats.items():
        v = sorted(values)
        print(f"{label:45s} {statistics.fmean(v) * 1e3:6.2f} {v[len(v) // 2] * 1e3:6.2f} "
              f"{v[len(v) * 9 // 10] * 1e3:6.2f} (n={len(v)}); {sum(v) / moved * 1e6:6.1f} us/transition")


if __name__ == "__main__":
    main()
