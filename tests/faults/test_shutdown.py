"""Stopping workers in the middle of heavy load (``tests/processes/`` covers one lightly
loaded worker, and the forced second Ctrl-C).

SIGTERM and SIGINT reach several busy workers at once: each exits 0, every handler that had
started is committed (none is abandoned), every row claimed but not started is handed back
due at once (no lease is left behind), and a worker started afterwards finishes every row,
each transition exactly once.
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime

import pytest

from processes.app_fixture import AUTOMATIC
from processes.procs import ProcApp, assert_exactly_once, error_count, wait_until, worker_pids

pytestmark = pytest.mark.slow

ROWS = 1000
TIMEOUT = 5.0  # lease: 10 s, far longer than a graceful stop should leave anything held


def test_sigterm_and_sigint_under_load_finish_handlers_and_hand_back_the_rest(
    proc_app: ProcApp,
) -> None:
    proc_app.migrate()
    proc_app.insert(ROWS)
    signals = [signal.SIGTERM, signal.SIGINT, signal.SIGTERM]
    workers = [
        proc_app.spawn("--concurrency", "4", sleep=0.02, timeout=TIMEOUT) for _ in signals
    ]
    total = ROWS * len(AUTOMATIC)
    wait_until(lambda: proc_app.ledger_count() >= 0.3 * total, "30% of the steps",
               timeout=120, watch=workers, app=proc_app)

    for worker, signum in zip(workers, signals, strict=True):
        worker.send(signum)
    for worker, signum in zip(workers, signals, strict=True):
        assert worker.wait(TIMEOUT + 30) == 0, worker.describe()
        assert f"received {signum.name}" in worker.stderr(), worker.describe()
    stopped = datetime.now(UTC)

    started = set(proc_app.started())
    committed = {(row_id, step) for row_id, step, _pid in proc_app.ledger()}
    assert started == committed, (
        f"started but not committed: {sorted(started - committed)[:10]}; "
        f"committed but never started: {sorted(committed - started)[:10]}"
    )
    assert error_count(proc_app) == 0
    unfinished = [r for r in proc_app.rows() if r.state in AUTOMATIC]
    assert len(unfinished) > 0, "the load was over before the signals: nothing to hand back"
    held = [
        (r.id, r.state, r.state_next) for r in unfinished
        if r.state_next is None or r.state_next > stopped
    ]
    assert not held, f"{len(held)} rows still leased after a graceful stop: {held[:5]}"
    assert worker_pids(proc_app) == []

    # Nothing was left half-done: a fresh worker finishes every row, each transition once.
    last = proc_app.spawn("--until-idle", "--concurrency", "4", timeout=TIMEOUT)
    assert last.wait(120) == 0, last.describe()
    assert_exactly_once(proc_app, ROWS)
