"""The database goes away under running workers.

PostgreSQL: a throwaway cluster is stopped (a clean fast shutdown, then a crash) and started
again while several workers run.  Workers must ride it out: no worker exits, each activity
(coordinator, writer, wake-up listener) logs the outage once and its end once, no traceback,
and every row ends in ``done`` with each transition committed exactly once.

SQLite: another process holds the write lock longer than the workers' busy timeout while
many worker processes run, so their claims, handler commits and writes fail with "database is
locked".  No worker crashes; every row still ends in ``done`` exactly once.
"""

from __future__ import annotations

import pytest

from processes.procs import ProcApp, assert_exactly_once
from stator._worker import HEARTBEAT_EVERY

from .cluster import Cluster
from .load import Load, outage_lines

pytestmark = pytest.mark.slow

BUSY_TIMEOUT = 10.0  # seconds: the workers' SQLite busy_timeout


def test_postgresql_restarts_under_running_workers(
    cluster_app: ProcApp, pg_cluster: Cluster
) -> None:
    load = Load(cluster_app, rows=1000, workers=3, sleep=0.01)
    load.start()
    for fraction, mode, downtime in ((0.2, "fast", 1.0), (0.55, "immediate", 3.0)):
        load.wait_progress(fraction)
        load.restart_database(pg_cluster, mode, downtime)
    figures = load.finish()
    figures.report()

    assert figures.rows_lost == 0 and figures.applied_twice == 0, figures.summary()
    assert_exactly_once(cluster_app, load.rows)
    assert figures.processes == 3, "a worker died during the outages"
    for proc in cluster_app.procs:
        logged = outage_lines(proc)
        assert "Traceback" not in proc.stderr(), proc.describe()
        # The coordinator, busy claiming, meets every restart: one line as it starts and one
        # as it ends.  The writer and the listener meet some of them, and say so once each.
        assert logged[("worker", "unavailable")] == figures.db_restarts, proc.describe()
        for activity in ("worker", "writer", "wake-up listener"):
            down = logged[(activity, "unavailable")]
            assert down <= figures.db_restarts, (
                f"{proc.name}: {activity} logged {down} outages for "
                f"{figures.db_restarts} restarts\n{proc.describe()}"
            )
            assert logged[(activity, "reachable")] == down, proc.describe()


def test_sqlite_lock_contention_never_crashes_a_worker(proc_app: ProcApp) -> None:
    if proc_app.backend != "sqlite":
        pytest.skip("SQLite's single write lock")
    load = Load(proc_app, rows=1000, workers=6, concurrency=4, sleep=0.0)
    load.start()
    load.wait_progress(0.3)
    # Longer than the busy timeout plus a heartbeat interval, so that every worker's
    # coordinator meets the lock in a statement that waits the whole busy timeout and fails.
    load.hold_sqlite_lock(BUSY_TIMEOUT + HEARTBEAT_EVERY + 1.0)
    figures = load.finish()
    figures.report()

    assert figures.rows_lost == 0 and figures.applied_twice == 0, figures.summary()
    assert_exactly_once(proc_app, load.rows)
    assert figures.processes == 6, "a worker died under lock contention"
    for proc in proc_app.procs:
        stderr = proc.stderr()
        assert "Traceback" not in stderr, proc.describe()
        logged = outage_lines(proc)
        # The coordinator or the writer meets the hold first (the two take turns on the write
        # lock inside the process, so either may be the one waiting when it is taken).
        met = logged[("worker", "unavailable")] + logged[("writer", "unavailable")]
        assert "database is locked" in stderr and met >= 1, (
            f"{proc.name} did not meet the lock once\n{proc.describe()}"
        )
        for activity in ("worker", "writer", "wake-up listener"):
            assert logged[(activity, "reachable")] == logged[(activity, "unavailable")] <= 1, (
                proc.describe()
            )
