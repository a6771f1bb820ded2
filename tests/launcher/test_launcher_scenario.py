"""Twenty SQLite tenants sharing four worker slots (three schedulers: the launcher holds one).

Every tenant's work must be done; how long it took and how the slots were shared (starts
and waiting time per tenant) are printed -- run with ``-s`` to see them -- but not
asserted: the machine decides how fast, the launcher decides that everyone gets a turn.
"""

from __future__ import annotations

import time

import pytest

from .conftest import Launch, wait_until

pytestmark = pytest.mark.slow

TENANTS, JOBS = 20, 60


def test_twenty_tenants_four_workers_all_work_done(launch: Launch) -> None:
    urls = [launch.tenant(f"tenant{i:02}", JOBS) for i in range(TENANTS)]
    began = time.monotonic()
    finished: dict[str, float] = {}
    launcher = launch.launcher(max_workers=4, sleep=0.01)

    def all_done() -> bool:
        for url in urls:
            if url not in finished and launch.done(url) == JOBS:
                finished[url] = time.monotonic() - began
        return len(finished) == len(urls)

    wait_until(all_done, 300, "every tenant's work done", launch.describe)
    elapsed = time.monotonic() - began
    state = launch.state()
    assert launcher.stop() == 0, launcher.describe()

    rows = {db["database"]: db for db in state["databases"]}
    assert len(rows) == TENANTS
    assert all(db["starts"] >= 1 and db["restarts"] == 0 for db in rows.values())
    assert all(launch.states(url) == {"done": JOBS} for url in urls)

    waits = sorted(db["total_wait"] for db in rows.values())
    starts = sorted(db["starts"] for db in rows.values())
    print(f"\n{TENANTS} tenants x {JOBS} jobs, --max-workers 4: all done in {elapsed:.1f}s "
          f"(launcher start to last tenant done)")
    print(f"scheduler starts per tenant: min {starts[0]}, max {starts[-1]}, "
          f"total {sum(starts)}; slot-exhaustion episodes "
          f"{state['launcher']['exhaustion_episodes']}")
    print(f"waiting for a slot per tenant: min {waits[0]:.1f}s, median "
          f"{waits[len(waits) // 2]:.1f}s, max {waits[-1]:.1f}s")
    done_at = sorted(finished.values())
    print(f"tenant finished after: first {done_at[0]:.1f}s, median "
          f"{done_at[len(done_at) // 2]:.1f}s, last {done_at[-1]:.1f}s")
