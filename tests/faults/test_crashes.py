"""Workers killed at any moment: SIGKILL from outside at random moments (with handlers
running or results not yet written), and workers that SIGKILL themselves at a random commit,
just before or just after it (mid-write).  Each dead worker is replaced; every row still ends
in ``done`` with each transition committed exactly once, and the rows a dead worker held are
due again (or running again elsewhere) within a bounded wait once their lease runs out; the
figures say how long that took.

This is the short version; ``test_torture.py`` is the long one (kills together with
PostgreSQL restarts or SQLite lock holds), run by ``python benchmarks/torture.py``.
"""

from __future__ import annotations

import time

import pytest

from processes.procs import ProcApp, assert_exactly_once

from .load import Load

pytestmark = pytest.mark.slow


def test_random_sigkills_with_restarts_lose_nothing(proc_app: ProcApp) -> None:
    load = Load(proc_app, rows=1000, workers=3, self_kills=2)
    load.start()
    for fraction in (0.15, 0.4, 0.65):
        load.wait_progress(fraction)
        time.sleep(load.rng.uniform(0.0, 0.3))
        load.kill_random()
    figures = load.finish()
    figures.report()

    assert figures.rows_lost == 0 and figures.applied_twice == 0, figures.summary()
    assert_exactly_once(proc_app, load.rows)
    # The faults really happened where they were meant to.
    assert figures.kills >= 4, figures.summary()
    assert figures.kills_in_flight >= 1, figures.summary()
    assert figures.kills_mid_write >= 1, figures.summary()
