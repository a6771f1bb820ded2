"""Worker machines whose clocks disagree.  Each worker process here runs with its clock
offset by some seconds (``STATOR_PROC_CLOCK_OFFSET``: the application passes an offset
``Clock`` to its ``Stator``), and every fourth row goes through a "not yet" (step b) and a
failure (step c), so that retries are scheduled by one worker's clock and picked up by
another's.

Within the tolerance (clocks within one handler timeout of each other) leases hold: no
handler runs twice, and every row finishes with each transition and each recorded failure
exactly once.  Beyond it (clocks apart by more than a whole lease) a worker whose clock runs
ahead takes over rows whose handlers are still running elsewhere: handlers then run twice,
but the fence still lets exactly one of their transitions through, and each failure is still
recorded once.  docs/guarantees.md states the tolerance.
"""

from __future__ import annotations

import signal
from collections import Counter

import pytest
from sqlalchemy import text

from processes.app_fixture import flaky, steps_of
from processes.procs import ProcApp, assert_exactly_once, lost_writes, wait_until

pytestmark = pytest.mark.slow

ROWS = 1000
FLAKY = 4  # every fourth row says "not yet" once and fails once


def run_skewed(app: ProcApp, offsets: list[float], timeout: float) -> dict[str, int]:
    """Run every row to done with one worker per clock offset; the figures of the run."""
    app.migrate()
    app.insert(ROWS)
    workers = [
        app.spawn("--concurrency", "4", sleep=0.005, timeout=timeout,
                  clock_offset=str(offset), flaky=str(FLAKY))
        for offset in offsets
    ]
    wait_until(lambda: app.done() == ROWS, f"all {ROWS} rows to reach done", timeout=180,
               watch=workers, app=app)
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(60) == 0, worker.describe()

    assert_exactly_once(app, ROWS, steps=lambda row_id: steps_of(row_id, FLAKY))
    with app.engine.connect() as conn:
        errors = conn.execute(text("SELECT row_pk, state, attempt FROM stator_errors")).all()
    expected = [(str(i), "c", 1) for i in range(1, ROWS + 1) if flaky(i, FLAKY)]
    assert sorted(errors) == sorted(expected), "each failure must be recorded exactly once"
    assert all(row.state_attempts == 0 for row in app.rows())
    runs = Counter(app.traced())
    figures = {
        "handler_reruns": sum(n - 1 for n in Counter(app.started()).values()),
        "lost_writes": lost_writes(app),
        "processes_that_ran_handlers": len({pid for _r, _s, pid in runs}),
    }
    print(f"\n[{app.backend}] clock offsets {offsets}, timeout {timeout:g}s: {figures}")
    return figures


def test_clocks_within_the_tolerance_keep_leases_and_retries_intact(proc_app: ProcApp) -> None:
    # Pairwise the clocks disagree by up to 4 s, less than the 5 s handler timeout.
    figures = run_skewed(proc_app, offsets=[-2.0, 0.0, 2.0], timeout=5.0)
    assert figures["handler_reruns"] == 0, figures  # no lease was taken over early


def test_clocks_beyond_the_tolerance_still_apply_each_transition_once(
    proc_app: ProcApp,
) -> None:
    # Clocks 6 s apart with a 2 s lease: the fast clock sees every other lease as expired.
    figures = run_skewed(proc_app, offsets=[-6.0, 0.0, 6.0], timeout=1.0)
    assert figures["lost_writes"] > 0, f"no lease was taken over: {figures}"
