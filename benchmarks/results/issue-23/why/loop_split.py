"""The stator-sql loop (``_limit.drive``'s steps, BenchRow, batch 100) with its backend's CPU
read from /proc before and after each transaction: server CPU per transition of the claim
transactions apart from the write-back ones.  /proc counts in clock ticks (10 ms), so each
reading is coarse; summed over ~600 of each they are not biased.  Own database
``why23_loop``.

    python loop_split.py ROWS
"""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import create_engine, text

from stator._bench._limit import _driver_sql, _transaction
from stator._bench._models import NEXT_STATE, BenchRow
from stator._bench._places import insert_rows
from stator._stator import Stator
from stator._store import Store

URL = "postgresql+psycopg://postgres@127.0.0.1:5432/"
DB = "why23_loop"
TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> float:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def main() -> None:
    rows = int(sys.argv[1])
    admin = create_engine(URL + "postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {DB}"))
        conn.execute(text(f"CREATE DATABASE {DB}"))
    admin.dispose()
    url = URL + DB
    setup = Stator(url, [BenchRow])
    setup.migrate()
    insert_rows(setup.engine, BenchRow.__tablename__, 1, rows)
    setup.dispose()
    engine = create_engine(url)
    store = Store(engine, [BenchRow])
    tracked = store.tracked[0]
    claim, write = _driver_sql(engine, tracked.sql.claim or ""), _driver_sql(engine, tracked.sql.write)
    leases = [(f"lease_{i}", timedelta(seconds=s.lease))
              for i, s in enumerate(tracked.graph.scheduled_states())]
    cols = [c.name for c in tracked.table.c]
    pk, st, fence = cols.index(tracked.pk), cols.index("state"), cols.index("state_next")
    ts, ts_json, begin = store.dialect.ts, store.dialect.ts_json, store.dialect.begin_for_writes
    raw = engine.raw_connection()
    cursor = raw.cursor()
    cursor.execute("SELECT pg_backend_pid()")
    pid = cursor.fetchone()[0]
    raw.commit()
    claim_cpu = write_cpu = 0.0
    moved = 0
    began = time.perf_counter()
    while True:
        now = datetime.now(UTC)
        params = {"now": ts(now), "limit": 100, **{n: ts(now + lease) for n, lease in leases}}
        c0 = backend_cpu(pid)
        claimed = _transaction(raw, cursor, begin, claim, params)
        c1 = backend_cpu(pid)
        claim_cpu += c1 - c0
        if not claimed:
            break
        changed, iso = ts_json(now), now.isoformat()
        params = store.dialect.batch_params([
            {"pk": r[pk], "fence_state": r[st], "fence": r[fence].isoformat(),
             "state": NEXT_STATE[r[st]], "changed": changed,
             "next": None if NEXT_STATE[r[st]] == "done" else changed,
             "attempts": 0, "moved": True, "changed_iso": iso} for r in claimed])
        applied = _transaction(raw, cursor, begin, write, params)
        write_cpu += backend_cpu(pid) - c1
        moved += len(applied)
    seconds = time.perf_counter() - began
    raw.close()
    engine.dispose()
    print(f"transitions={moved} s={seconds:.2f} tps={moved / seconds:.0f} "
          f"load_1m={os.getloadavg()[0]:.2f}")
    print(f"server CPU per transition: claim {claim_cpu / moved * 1e6:.1f} us, "
          f"write-back {write_cpu / moved * 1e6:.1f} us, "
          f"total {(claim_cpu + write_cpu) / moved * 1e6:.1f} us")


if __name__ == "__main__":
    main()
