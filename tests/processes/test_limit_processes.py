"""Concurrency limits across processes: four ``stator run`` workers (four handler threads
each) on one table whose deliveries may run at most two at once per domain.  Every handler
records its start and end; at no moment do more than two of one domain overlap."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import insert, select

from . import limits_app
from .procs import ProcApp


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one moment (an end at the same instant as a start first)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                    key=lambda e: (e[0], e[1]))
    most = now = 0
    for _at, step in events:
        now += step
        most = max(most, now)
    return most


def test_four_workers_never_run_more_than_the_limit_per_domain(tmp_path, proc_db_url) -> None:
    app = ProcApp(proc_db_url, tmp_path, limits_app)
    try:
        app.migrate()
        # One domain hammered (160 rows), nine more with ten each, interleaved by id.
        domains = ["hot"] * 160 + [f"d{i}" for i in range(9) for _ in range(10)]
        with app.engine.begin() as conn:
            conn.execute(insert(app.jobs), [
                {"id": i, "domain": d} for i, d in enumerate(domains, 1)
            ])
        workers = [app.spawn("--until-idle", "--concurrency", "4", sleep=0.02)
                   for _ in range(4)]
        for worker in workers:
            assert worker.wait(180) == 0, worker.describe()
        assert app.states() == {"sent": len(domains)}
        ledger = app.ledger_table
        with app.engine.connect() as conn:
            runs = conn.execute(select(ledger.c.domain, ledger.c.started, ledger.c.ended,
                                       ledger.c.pid)).all()
        assert all(ended is not None for _d, _s, ended, _p in runs)
        by_domain: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for domain, started, ended, _pid in runs:
            by_domain[domain].append((started, ended))
        overlaps = {d: max_overlap(v) for d, v in by_domain.items()}
        print(f"\n[{app.backend}] most at once per domain: {overlaps}; "
              f"processes that ran deliveries: {len({pid for *_x, pid in runs})}")
        assert max(overlaps.values()) <= limits_app.LIMIT, overlaps
    finally:
        app.close()
