"""The long version of the fault suite, run by ``python benchmarks/torture.py`` (skipped
unless ``STATOR_TORTURE=1``): many rows, several worker processes, SIGKILLs throughout (from
outside at random moments, and self-inflicted at a random commit: mid-write), and between
them PostgreSQL restarts of a throwaway cluster (fast shutdowns and crashes) or, on SQLite,
the write lock held past the workers' busy timeout.  Sizes come from ``STATOR_TORTURE_*``.

It ends like every fault test, by checking every row and the ledger, and reports its figures
(``$STATOR_TORTURE_REPORT``): rows lost and transitions applied twice must both be 0.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from processes.app_fixture import steps_of
from processes.procs import ProcApp, assert_exactly_once

from .cluster import Cluster
from .load import Load, outage_lines

pytestmark = [pytest.mark.slow, pytest.mark.torture]


def torture_setting(name: str, default: int) -> int:
    """A size of the long run, from ``STATOR_TORTURE_<NAME>`` (set by the torture script)."""
    return int(os.environ.get(f"STATOR_TORTURE_{name}", default))


@pytest.fixture(params=["sqlite", "postgresql"])
def torture_app(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[ProcApp, Cluster | None]]:
    """The long run's database: a SQLite file, or a throwaway cluster it can restart."""
    if request.param == "postgresql":
        yield request.getfixturevalue("cluster_app"), request.getfixturevalue("pg_cluster")
        return
    app = ProcApp(f"sqlite:///{tmp_path / 'stator.db'}", tmp_path)
    try:
        yield app, None
    finally:
        app.close()


def test_torture(torture_app: tuple[ProcApp, Cluster | None], rng: random.Random) -> None:
    """Many rows, several workers, SIGKILLs throughout (from outside and self-inflicted
    mid-write), and PostgreSQL restarts (fast and crash) or SQLite lock holds between them."""
    app, cluster = torture_app
    kills = torture_setting("KILLS", 20)
    load = Load(
        app, rows=torture_setting("ROWS", 10_000), workers=torture_setting("WORKERS", 4),
        self_kills=max(kills // 4, 1), die_after="50-2000", recovery_slack=600.0,
        flaky=torture_setting("FLAKY", 0), overrun=torture_setting("OVERRUN", 0),
    )
    outer_kills = kills - load.self_kills
    if cluster is not None:
        others = ["restart"] * torture_setting("RESTARTS", 2)
    else:
        others = ["lock"] * torture_setting("LOCKS", 2)
    events = ["kill"] * outer_kills + others
    rng.shuffle(events)
    load.start()
    for i, event in enumerate(events):
        load.wait_progress(0.9 * (i + 1) / (len(events) + 1), timeout=900)
        time.sleep(rng.uniform(0.0, 0.5))
        if event == "kill":
            load.kill_random()
        elif event == "restart":
            assert cluster is not None
            mode = "immediate" if load.figures.db_restarts % 2 else "fast"
            load.restart_database(cluster, mode, downtime=rng.uniform(1.0, 5.0))
        else:
            load.hold_sqlite_lock(12.0)
    figures = load.finish(timeout=1800)
    figures.report()

    assert figures.rows_lost == 0 and figures.applied_twice == 0, figures.summary()
    assert_exactly_once(app, load.rows, steps=lambda row: steps_of(row, load.flaky))
    for proc in app.procs:
        logged = outage_lines(proc)
        for (activity, kind), n in logged.items():
            assert n <= figures.db_restarts + figures.lock_holds, (activity, kind, n)
