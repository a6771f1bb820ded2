"""What-if drains (plain rows, concurrency 4, batch 100), each lever patched in from outside
for this process only (nothing in src/ changed; these patches drop safety the engine keeps,
e.g. the coordinator's deadline enforcement while a claim runs: measurements, not proposals).

    python try_levers.py ROWS LEVER[,LEVER] ...
      base     : as shipped
      inline   : the claim runs on the coordinator thread (no db-calls hand-off, no Future)
      ahead    : claim again as soon as the backlog is at most the batch size (not half)
      switch1  : sys.setswitchinterval(0.001)

Prints rate, process CPU per transition, and the claim-cycle time.
"""

from __future__ import annotations

import os
import resource
import sys
import time

from sqlalchemy import create_engine, text

from stator._bench._models import BenchPlainRow
from stator._bench._places import insert_rows
from stator._stator import Stator
from stator._worker import _coordinator, _db_steps

URL = "postgresql+psycopg://postgres@127.0.0.1:5432/"
DB = "why23_levers"


def cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def apply(levers: set[str]) -> None:
    if "inline" in levers:
        orig = _db_steps.DatabaseSteps.run

        def run(self, action, what="the database"):  # type: ignore[no-untyped-def]
            if what == "claiming":
                return bool(action())
            return orig(self, action, what)
        _db_steps.DatabaseSteps.run = run  # type: ignore[method-assign]
    if "ahead" in levers:
        def room(self):  # type: ignore[no-untyped-def]
            backlog = self._handlers.backlog
            target = self._target_backlog()
            return min(target - backlog if backlog < target else 0, self._tasks_left())
        _coordinator.Worker._room = room  # type: ignore[method-assign]
    if "switch1" in levers:
        sys.setswitchinterval(0.001)


def main() -> None:
    rows = int(sys.argv[1])
    levers = set(sys.argv[2].split(",")) - {"base"}
    apply(levers)
    admin = create_engine(URL + "postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {DB}"))
        conn.execute(text(f"CREATE DATABASE {DB}"))
    admin.dispose()
    url = URL + DB
    setup = Stator(url, [BenchPlainRow])
    setup.migrate()
    insert_rows(setup.engine, BenchPlainRow.__tablename__, 1, rows)
    setup.dispose()
    stator = Stator(url, [BenchPlainRow], concurrency=4, batch_size=100)
    with stator.engine.connect():
        pass
    worker = stator.worker(until_idle=True, idle_window=0.0)
    c0, began = cpu(), time.perf_counter()
    moved = worker.run().transitions
    seconds, used = time.perf_counter() - began, cpu() - c0
    stator.dispose()
    print(f"levers={sys.argv[2]:14s} transitions={moved} s={seconds:.2f} tps={moved / seconds:.0f} "
          f"cpu_us={used / moved * 1e6:.1f} load_1m={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
