"""EXPLAIN (ANALYZE, BUFFERS) of one claim of 100 and one write-back of those 100: Stator's
statements (TrackedModel.sql, as the stator-sql loop and the engine send them) on
stator_bench_rows, 20,000 rows spread over the three scheduled states (id % 3); each inside a
transaction rolled back, repeated REPEATS times (plan-time + execution-time means printed,
the last plan in full).  Own database ``why23_explain``.  The "minimal-style" claim on this
table scans it whole (no index on state_next alone, unlike the minimal loop's own table):
shown for the plan shape only, not as the minimal loop's cost.

    python explain_claim.py [REPEATS]
"""

from __future__ import annotations

import re
import statistics
import sys
from datetime import UTC, datetime, timedelta

from sqlalchemy import create_engine, text

from stator._bench._models import BenchRow
from stator._bench._places import insert_rows
from stator._stator import Stator
from stator._store import Store

URL = "postgresql+psycopg://postgres@127.0.0.1:5432/"
DB = "why23_explain"


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    admin = create_engine(URL + "postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {DB}"))
        conn.execute(text(f"CREATE DATABASE {DB}"))
    admin.dispose()
    url = URL + DB
    st = Stator(url, [BenchRow])
    st.migrate()
    insert_rows(st.engine, BenchRow.__tablename__, 1, 20000)
    store = Store(st.engine, [BenchRow])
    tracked = store.tracked[0]
    now = datetime.now(UTC)
    with st.engine.begin() as conn:
        conn.execute(text("UPDATE stator_bench_rows SET state = (ARRAY['first','second','third'])"
                          "[1 + id % 3], state_next = :past - (id * interval '1 ms')"),
                     {"past": now - timedelta(minutes=5)})
    with st.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE stator_bench_rows"))
    leases = {f"lease_{i}": now + timedelta(seconds=s.lease)
              for i, s in enumerate(tracked.graph.scheduled_states())}
    statements = {
        "stator claim": (tracked.sql.claim, {"now": now, "limit": 100, **leases}),
        "minimal-style claim (same table)": (
            "UPDATE stator_bench_rows SET state_next = :lease_0 WHERE id = ANY(ARRAY(SELECT id "
            "FROM stator_bench_rows WHERE state_next <= :now ORDER BY state_next LIMIT :limit "
            "FOR UPDATE SKIP LOCKED)) RETURNING id, state, state_changed, state_next, "
            "state_attempts", {"now": now, "limit": 100, **leases}),
    }
    for name, (sql, params) in statements.items():
        plans, execs = [], []
        last = ""
        for _ in range(repeats):
            with st.engine.connect() as conn:
                rows = conn.execute(text("EXPLAIN (ANALYZE, BUFFERS) " + sql), params).all()
                conn.rollback()
            last = "\n".join(r[0] for r in rows)
            plans.append(float(re.search(r"Planning Time: ([\d.]+)", last).group(1)))
            execs.append(float(re.search(r"Execution Time: ([\d.]+)", last).group(1)))
        print(f"== {name}: planning {statistics.fmean(plans):.3f} ms, execution "
              f"{statistics.fmean(execs):.3f} ms (means of {repeats}; median exec "
              f"{statistics.median(execs):.3f})")
        print(last)
        print()
    st.dispose()


if __name__ == "__main__":
    main()
