"""Drain ROWS BenchRow rows (a -> b -> c, no-op handlers) with one in-process worker
(concurrency 4, batch 100) and print the rate and this process's CPU per transition.

    python prof_drain.py sqlite 20000
    python prof_drain.py postgresql+psycopg://postgres@127.0.0.1:5432/postgres 20000
    python prof_drain.py sqlite 20000 plain      # the same steps with plain rows

On PostgreSQL it works in a database of its own, ``hotpath_prof``, made afresh each run.
Under ``py-spy record --gil -f raw -r 500 -o FILE -- python prof_drain.py …`` it gives the
profiles that ``top_self.py`` reads.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time

from sqlalchemy import create_engine, text

from stator._bench._models import BenchRow

try:
    from stator._bench._models import BenchPlainRow
except ImportError:  # a version from before plain rows (the 9626597): ORM rows only
    BenchPlainRow = BenchRow
from stator._bench._places import insert_rows
from stator._stator import Stator


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else "sqlite"
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    model = BenchPlainRow if sys.argv[3:] == ["plain"] else BenchRow
    if url == "sqlite":
        url = f"sqlite:///{tempfile.mkdtemp()}/p.db"
    else:
        admin = create_engine(url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text("DROP DATABASE IF EXISTS hotpath_prof"))
            conn.execute(text("CREATE DATABASE hotpath_prof"))
        admin.dispose()
        url = url.rsplit("/", 1)[0] + "/hotpath_prof"
    setup = Stator(url, [model])
    setup.migrate()
    insert_rows(setup.engine, model.__tablename__, 1, rows)
    setup.dispose()
    stator = Stator(url, [model], concurrency=4, batch_size=100)
    with stator.engine.connect():
        pass  # connected before the clock starts
    worker = stator.worker(until_idle=True, idle_window=0.0)
    cpu0, began = cpu(), time.perf_counter()
    summary = worker.run()
    seconds, used = time.perf_counter() - began, cpu() - cpu0
    moved = summary.transitions
    print(f"transitions={moved} s={seconds:.2f} tps={moved / seconds:.0f} "
          f"cpu_us={used / moved * 1e6:.1f}")
    stator.dispose()


if __name__ == "__main__":
    main()
