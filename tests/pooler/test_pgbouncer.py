"""Stator through PgBouncer in transaction-pooling mode (Debian's 1.18: no protocol-level
prepared statements).  Claims, fenced writes and handler sessions go through the pooler with
``?prepare_threshold=none``; wake-ups use a direct connection (``--listen-url``), or, without
one, the listener finds that its notifications never arrive, says so once and polls.
"""

from __future__ import annotations

import signal

import pytest

from processes.procs import ProcApp, assert_exactly_once, wait_until

from .conftest import PgBouncer

pytestmark = pytest.mark.slow

NO_NOTIFY = "notifications do not arrive"


def run_to_the_end(app: ProcApp, rows: int, *args: str, polling: bool = False) -> None:
    procs = [app.spawn("--concurrency", "4", *args, timeout=5.0) for _ in range(2)]
    wait_until(lambda: app.done() == rows, f"{rows} rows done through PgBouncer", timeout=120,
               watch=procs, app=app)
    if polling:  # the late rows must be found by polling, not by a worker still busy
        wait_until(lambda: all(NO_NOTIFY in p.stderr() for p in procs),
                   "both workers to find that notifications do not arrive", timeout=120,
                   watch=procs, app=app)
    # Work that arrives while the workers idle: found by a wake-up or by polling.
    app.insert(rows, start=rows + 1)
    wait_until(lambda: app.done() == 2 * rows, "the late rows done", timeout=60, watch=procs,
               app=app)
    for proc in procs:
        proc.send(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(60) == 0, proc.describe()
    assert_exactly_once(app, 2 * rows)


def test_through_pgbouncer_with_a_direct_listen_url(pgbouncer: PgBouncer, pooled_app: ProcApp):
    pooled_app.migrate()
    pooled_app.insert(300)
    run_to_the_end(pooled_app, 300, "--listen-url", pgbouncer.cluster.url)
    for proc in pooled_app.procs:
        assert NO_NOTIFY not in proc.stderr(), proc.describe()


def test_through_pgbouncer_alone_wake_ups_fall_back_to_polling(pooled_app: ProcApp):
    pooled_app.migrate()
    pooled_app.insert(100)
    run_to_the_end(pooled_app, 100, polling=True)
    for proc in pooled_app.procs:
        assert proc.stderr().count(NO_NOTIFY) == 1, proc.describe()
