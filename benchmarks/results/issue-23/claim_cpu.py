"""The claiming thread's CPU per claimed row, alone: ``Driver.claim`` of 100 rows at a time
on a table of ROWS due rows until none is left, in a PostgreSQL database (or SQLite file) of
its own; prints µs of this thread's CPU per row (``time.thread_time``), claim by claim median.

    python claim_cpu.py ROWS [plain|orm] [sqlite]     # the src on PYTHONPATH is measured
"""

from __future__ import annotations

import secrets
import statistics
import sys
import tempfile
import time

import psycopg

from stator import ManualClock
from stator._bench._models import BenchPlainRow, BenchRow
from stator._bench._places import insert_rows
from stator._stator import Stator

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
MODEL = BenchRow if "orm" in sys.argv[2:] else BenchPlainRow
ON_SQLITE = "sqlite" in sys.argv[2:]


def main() -> None:
    name = f"claim_cpu_{secrets.token_hex(4)}"
    if ON_SQLITE:
        url = f"sqlite:///{tempfile.mkdtemp()}/claim.db"
    else:
        with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres",
                             autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    try:
        clock = ManualClock()  # now: the server defaults make the rows due at its now
        stator = Stator(url, [MODEL], clock=clock)
        stator.migrate()
        insert_rows(stator.engine, MODEL.__tablename__, 1, ROWS)
        clock.advance(60)
        store = stator.store
        (tracked,) = store.tracked
        per_row: list[float] = []
        while True:
            cpu = time.thread_time()
            rows = store.claim(tracked, clock.now(), 100)
            spent = time.thread_time() - cpu
            if not rows:
                break
            per_row.append(spent / len(rows) * 1e6)
        print(f"{MODEL.__name__} {'sqlite' if ON_SQLITE else 'postgresql'}: claim CPU "
              f"{statistics.median(per_row):.2f} µs per row (median of {len(per_row)} claims)")
        stator.dispose()
    finally:
        if not ON_SQLITE:
            with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres",
                                 autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
