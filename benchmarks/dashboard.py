"""How fast the dashboard's pages answer on a big table (issue #11: < 200 ms at 10M rows).

    python benchmarks/dashboard.py [--db postgresql://postgres@127.0.0.1/postgres]
                                   [--rows 10000000] [--repeat 7] [--keep]

Creates a throwaway PostgreSQL database (dropped afterwards unless --keep), one Stator model
whose table gets ``--rows`` rows in one ``INSERT … SELECT generate_series`` (95% done,
4% in the handler state — half due now, a tenth of them failing — 0.5% held for the
application, 0.5% failed), 10,000 error-log rows and an hour of stats, then ``VACUUM ANALYZE``
as autovacuum would.  Each page is fetched in-process through Starlette's test client
(templates and all, no network): one warm-up, then the median and the worst of ``--repeat``.
A sequential scan of the table takes seconds at this size, so times in milliseconds also
show that no page scans it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from sqlalchemy import String, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from starlette.testclient import TestClient

from stator import State, StateGraph, Stator
from stator.dashboard import create_app
from stator.sqlalchemy import StatorMixin


class Base(DeclarativeBase):
    pass


class Parcel(StateGraph):
    new = State(retry_after=60, max_attempts=5)
    held = State(externally_progressed=True)
    done = State()
    failed = State()
    new.transitions_to(done)
    new.transitions_to(held)
    new.fails_to(failed)
    held.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        return cls.done


class Shipment(StatorMixin, Base):
    __tablename__ = "shipments"
    state_graph = Parcel
    id: Mapped[int] = mapped_column(primary_key=True)
    note: Mapped[str | None] = mapped_column(String(100))


FILL = """
INSERT INTO shipments (id, note, state, state_changed, state_next, state_attempts)
SELECT g, 'parcel ' || g,
       CASE WHEN g % 200 = 0 THEN 'held' WHEN g % 200 = 1 THEN 'failed'
            WHEN g % 25 = 2 THEN 'new' ELSE 'done' END,
       now() - interval '1 day',
       CASE WHEN g % 200 IN (0, 1) THEN NULL
            WHEN g % 25 = 2 AND g % 50 = 2 THEN now() - (g % 3600) * interval '1 second'
            WHEN g % 25 = 2 THEN now() + (g % 3600) * interval '1 second'
            ELSE NULL END,
       CASE WHEN g % 25 = 2 AND g % 250 = 2 THEN 1 ELSE 0 END
FROM generate_series(1, :rows) AS g
"""

ERRORS = """
INSERT INTO stator_errors (model, row_pk, state, attempt, kind, message, traceback, created_at,
                           worker_id)
SELECT 'shipments', (g * 250 + 2)::text, 'new', 1, 'error',
       'ConnectionError: remote refused ' || g, 'Traceback (most recent call last): ...',
       now() - (g % 3600) * interval '1 second', 'bench'
FROM generate_series(1, 10000) AS g
"""

STATS = """
INSERT INTO stator_stats (worker_id, model, period_start, period_end, processed, transitions,
                          errors, timeouts, deleted, lost, queue_depth, lag_seconds)
SELECT 'bench', 'shipments', now() - (g + 30) * interval '1 second',
       now() - g * interval '1 second', 3000, 3000, 10, 0, 0, 0, 100, 0.5
FROM generate_series(0, 3600, 30) AS g;
INSERT INTO stator_edge_stats (worker_id, model, source, target, period_end, count)
SELECT 'bench', 'shipments', 'new', 'done', now() - g * interval '1 second', 2990
FROM generate_series(0, 3600, 30) AS g
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="postgresql+psycopg://postgres@127.0.0.1/postgres",
                        help="a PostgreSQL server's maintenance database URL")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()

    admin_url = make_url(args.db).set(drivername="postgresql+psycopg")
    name = "stator_dashboard_bench"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = admin_url.set(database=name).render_as_string(hide_password=False)
    stator = Stator(url, [Shipment])
    try:
        stator.migrate()
        began = time.monotonic()
        with stator.engine.begin() as conn:
            conn.execute(text(FILL), {"rows": args.rows})
            conn.execute(text(ERRORS))
            for statement in STATS.split(";"):
                conn.execute(text(statement))
        filled = time.monotonic() - began
        with stator.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))
            size = conn.execute(text(
                "SELECT pg_size_pretty(pg_total_relation_size('shipments'))")).scalar()
        print(f"{args.rows:,} rows ({size} with indexes) in {filled:.0f}s", file=sys.stderr)
        measure(stator, args.repeat)
    finally:
        stator.dispose()
        if not args.keep:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def measure(stator: Stator, repeat: int) -> None:
    client = TestClient(create_app(stator, token="bench"))
    first = client.get("/models/shipments/rows?state=new").text
    cursor = first.split('class="next" href="?', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    pages = {
        "overview": "/",
        "overview refresh (JSON)": "/api/overview.json",
        "graph": "/models/shipments/graph",
        "graph refresh (JSON)": "/api/models/shipments/graph.json",
        "rows: handler state, first page": "/models/shipments/rows?state=new",
        "rows: handler state, next page": f"/models/shipments/rows?{cursor}",
        "rows: due and failing": "/models/shipments/rows?state=new&due=1&failing=1",
        "rows: all, by primary key": "/models/shipments/rows",
        "rows: a 0.5% terminal state": "/models/shipments/rows?state=failed",
        "one row (with its errors)": "/models/shipments/rows/502",
        "errors": "/errors",
        "/metrics": "/metrics",
    }
    results = []
    for label, path in pages.items():
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code)
        times = []
        for _ in range(repeat):
            began = time.perf_counter()
            client.get(path)
            times.append((time.perf_counter() - began) * 1000)
        results.append({"page": label, "path": path, "median_ms": statistics.median(times),
                         "max_ms": max(times)})
    print("| page | median | worst |")
    print("| --- | --- | --- |")
    for r in results:
        print(f"| {r['page']} | {r['median_ms']:.0f} ms | {r['max_ms']:.0f} ms |")
    print(json.dumps(results), file=sys.stderr)


if __name__ == "__main__":
    main()
