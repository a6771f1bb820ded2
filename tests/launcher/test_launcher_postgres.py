"""A real launcher discovering the databases of a PostgreSQL server.

The databases share a random name prefix and the launcher discovers
``postgresql://…/<prefix>*``: it sees those and nothing else on the shared server.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import insert

from stator import Stator

from . import tenant_app
from .conftest import Launch, PgTenants, jobs, key_for, wait_until

pytestmark = pytest.mark.slow


def test_server_databases_are_discovered_messaged_and_dropped(
    launch: Launch, pg_tenants: PgTenants
) -> None:
    stators: list[Stator] = []

    def tenant(name: str, count: int, *, migrated: bool = True) -> str:
        url = pg_tenants.create(name)
        stator = tenant_app.stator.with_db(url)
        stators.append(stator)
        if migrated:
            stator.migrate()
            with stator.engine.begin() as conn:
                conn.execute(insert(jobs),
                             [{"id": i} for i in range(1, count + 1)])
        return url

    def done(url: str) -> int:
        return launch.states(url)["done"]

    try:
        a = tenant("a", 20)
        b = tenant("b", 0, migrated=False)
        launcher = launch.launcher(max_workers=3, discover=pg_tenants.pattern)
        wait_until(lambda: done(a) == 20, 60, "the migrated database's work", launch.describe)
        disabled = wait_until(lambda: launch.db(b).get("state") == "disabled" and launch.db(b),
                              60, "the bare database disabled", launch.describe)
        assert "no Stator tables" in disabled["last_error"]
        assert {db["database"] for db in launch.state()["databases"]} == {
            key_for(a), key_for(b)}  # nothing else on the server

        c = tenant("c", 10)  # created while the launcher runs
        wait_until(lambda: done(c) == 10, 60, "the new database's work", launch.describe)

        # `stator migrate` sends restart; new work in an idle database is noticed (NOTIFY)
        assert launch.cli("migrate", "tenant_app:stator", "--db", b).returncode == 0
        wait_until(lambda: launch.db(b).get("state") != "disabled", 60, "b enabled",
                   launch.describe)
        launch.insert(b, 7)
        wait_until(lambda: done(b) == 7, 60, "b's work", launch.describe)

        stopped = launch.cli("ctl", "stop", a, "--wait", "30")
        assert stopped.returncode == 0 and "acknowledged: disabled" in stopped.stdout, (
            stopped.stdout + stopped.stderr)
        started = launch.cli("ctl", "start", a, "--wait", "30")
        assert started.returncode == 0 and "acknowledged: started" in started.stdout, (
            started.stdout + started.stderr)

        for stator in stators[2:]:
            stator.dispose()
        pg_tenants.drop(c)
        wait_until(lambda: not launch.db(c), 60, "the dropped database forgotten",
                   launch.describe)
        report = json.loads(launch.cli("launcher-status", "--json").stdout)
        assert {db["database"] for db in report["databases"]} == {key_for(a), key_for(b)}
        assert launcher.stop() == 0, launcher.describe()
    finally:
        for stator in stators:
            stator.dispose()


def test_notifications_reach_the_launcher_between_rounds(
    launch: Launch, pg_tenants: PgTenants
) -> None:
    """With a full round only every 10 minutes, what the launcher learns comes from LISTEN
    (new work, messages to an enabled database) and from the control place's FIFO (`ctl`
    run next to it) -- the waits below end long before any round would."""
    url = pg_tenants.create("a")
    stator = tenant_app.stator.with_db(url)
    try:
        stator.migrate()
        launcher = launch.launcher("--discover-every", "600", discover=pg_tenants.pattern)
        wait_until(lambda: launch.db(url).get("state") == "enabled", 60, "registered",
                   launch.describe)
        with stator.engine.begin() as conn:  # the insert trigger NOTIFYs
            conn.execute(insert(jobs), [{"id": i} for i in range(1, 6)])
        wait_until(lambda: launch.states(url)["done"] == 5, 60, "work noticed by LISTEN",
                   launch.describe)
        far = launch.cli("ctl", "stop", url, "--wait", "60", "--control", "elsewhere")
        assert far.returncode == 0 and "acknowledged: disabled" in far.stdout, (
            far.stdout + far.stderr)
        near = launch.cli("ctl", "start", url, "--wait", "60")  # pokes .stator-launcher/wake
        assert near.returncode == 0 and "acknowledged: started" in near.stdout, (
            near.stdout + near.stderr)
        assert launcher.stop() == 0, launcher.describe()
    finally:
        stator.dispose()
