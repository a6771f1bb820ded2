"""The handler thread's per-row path on its own: ``Executor.before`` and ``run_sync`` over
claimed plain rows (BenchPlainRow, a no-op handler that moves the row), best of five passes.

    python rowpath.py 20000                               # this checkout
    PYTHONPATH=/other/checkout/src python rowpath.py 20000  # another, same interpreter
"""

from __future__ import annotations

import sys
import tempfile
import time

from stator._bench._models import BenchPlainRow
from stator._bench._places import insert_rows
from stator._clock import handlers_see
from stator._execute import Executor, Task
from stator._stator import Stator


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    stator = Stator(f"sqlite:///{tempfile.mkdtemp()}/rows.db", [BenchPlainRow])
    stator.migrate()
    insert_rows(stator.engine, BenchPlainRow.__tablename__, 1, count)
    (tracked,) = stator.store.tracked
    executor = Executor(stator.store, stator.clock, "rowpath")
    tasks: list[Task] = []
    while len(tasks) < count:
        rows = stator.store.claim(tracked, stator.clock.now(), 500)
        if not rows:
            break
        tasks += [executor.prepare(tracked, obj, claimed) for obj, claimed in rows]
    shared = "clock_seen" in Executor.run_sync.__code__.co_varnames  # after the change
    clock = stator.clock
    best = 1e9
    for _ in range(5):
        began = time.perf_counter()
        with handlers_see(clock):
            now = clock.now()
            for task in tasks:
                task.write, task.deadline = None, 1e18
                ready = executor.before(task, now) if shared else executor.before(task)
                if not ready:
                    task.finish()
                elif shared:
                    now = executor.run_sync(task, clock_seen=True) or clock.now()  # type: ignore[call-arg,func-returns-value]
                else:
                    executor.run_sync(task)
        best = min(best, (time.perf_counter() - began) / len(tasks))
    print(f"{len(tasks)} rows, best {best * 1e6:.2f} us per row (before + run_sync)")


if __name__ == "__main__":
    main()
