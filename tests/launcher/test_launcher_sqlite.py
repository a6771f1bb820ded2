"""Real launcher processes over SQLite tenant files.

Every wait is bounded (``wait_until``) and every assertion is about what happened, never
about how fast.  The launchers run with short intervals (discovery every 0.5 s, SQLite
checks every 0.2 s) so the tests do not wait on defaults meant for production.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from sqlalchemy import delete, func, select

from stator._launcher._children import is_our_scheduler
from stator._store._schema import messages_table
from stator.launcher import send_message

from .conftest import Launch, key_for, wait_until

pytestmark = pytest.mark.slow


def test_tenants_are_discovered_run_disabled_and_dropped(launch: Launch) -> None:
    a = launch.tenant("a", 30)
    b = launch.tenant("b", 30)
    c = launch.tenant("c", migrated=False)
    launcher = launch.launcher(max_workers=2)  # one scheduler slot for three databases

    wait_until(lambda: launch.done(a) == 30 and launch.done(b) == 30, 60,
               "both migrated tenants done", launch.describe)
    no_schema = wait_until(lambda: launch.db(c).get("state") == "disabled" and launch.db(c),
                           60, "the unmigrated tenant disabled", launch.describe)
    assert "no Stator tables" in no_schema["last_error"]
    assert no_schema["restarts"] == 0  # quitting for lack of schema is not a crash
    state = launch.state()
    assert state["launcher"]["exhaustion_episodes"] >= 1
    assert "wait their turn" in launcher.stderr()
    wait_until(lambda: launch.state()["launcher"]["slots_used"] == 1, 60,
               "every scheduler gone idle, handing its slot back", launch.describe)
    for url in (a, b):
        assert launch.db(url)["state"] == "enabled"
        assert launch.db(url)["last_exit"] == "scheduler idle"

    # a database created later is discovered and run
    d = launch.tenant("d", 10)
    wait_until(lambda: launch.done(d) == 10, 60, "the new tenant done", launch.describe)

    # migrating the disabled one sends restart: it is enabled and runs its work
    migrated = launch.cli("migrate", "tenant_app:stator", "--db", c)
    assert migrated.returncode == 0, migrated.stderr
    assert "sent restart to the launcher" in migrated.stdout
    wait_until(lambda: launch.db(c).get("state") != "disabled", 60, "the migrated tenant "
               "enabled again", launch.describe)
    launch.insert(c, 10)
    wait_until(lambda: launch.done(c) == 10, 60, "the migrated tenant's work done",
               launch.describe)

    # new work in an idle tenant wakes it (a commit seen by the SQLite change check)
    launch.insert(a, 5, first=100)
    wait_until(lambda: launch.done(a) == 35, 60, "new work in an idle tenant done",
               launch.describe)

    # a tenant file that disappears is dropped
    launch.stator(d).dispose()
    os.remove(launch.tenants / "d.db")
    for side in ("d.db-wal", "d.db-shm"):
        if (launch.tenants / side).exists():
            os.remove(launch.tenants / side)
    wait_until(lambda: not launch.db(d), 60, "the removed tenant dropped", launch.describe)

    status = launch.cli("launcher-status")
    assert status.returncode == 0, status.stderr
    assert key_for(a) in status.stdout and "disabled" not in status.stdout
    report = json.loads(launch.cli("launcher-status", "--json").stdout)
    assert report["launcher"]["running"] is True
    assert {db["database"] for db in report["databases"]} == {key_for(u) for u in (a, b, c)}

    pids = {(pid, start) for pid, start in launch.seen_pids}
    assert launcher.stop() == 0, launcher.describe()
    assert not [pid for pid, start in pids if is_our_scheduler(pid, start)]
    stopped = launch.cli("launcher-status", "--json")
    assert stopped.returncode == 1  # no launcher running there any more
    assert json.loads(stopped.stdout)["launcher"]["running"] is False


def test_messages_take_effect_when_committed_and_never_when_rolled_back(
    launch: Launch,
) -> None:
    a = launch.tenant("a")
    launch.launcher(max_workers=2)
    # nothing due: registered, and waiting for work without taking a slot
    wait_until(lambda: launch.db(a).get("state") == "enabled", 60, "the tenant registered",
               launch.describe)
    assert launch.db(a)["starts"] == 0

    stopped = launch.cli("ctl", "stop", a, "--wait", "30")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "acknowledged: disabled" in stopped.stdout
    assert launch.db(a)["state"] == "disabled"

    # a disabled database is not started by new work ...
    launch.insert(a, 5)
    launch.after_polls(2)
    assert launch.done(a) == 0 and launch.db(a)["state"] == "disabled"

    engine = launch.stator(a).engine
    # ... nor by a message whose transaction rolled back
    with engine.connect() as conn:
        send_message(conn, "start")
        conn.rollback()
    # ... nor by one not yet committed
    with engine.connect() as conn:
        sent = send_message(conn, "start")
        launch.after_polls(2)
        assert launch.db(a)["state"] == "disabled" and launch.done(a) == 0
        assert sent.reply(0) is None
        conn.commit()
    assert sent.wait(30) is True
    wait_until(lambda: launch.done(a) == 5, 60, "work done after the committed start",
               launch.describe)
    with engine.connect() as conn:
        rows = conn.execute(select(messages_table.c.kind, messages_table.c.ack)
                            .order_by(messages_table.c.id)).all()
    assert [tuple(r) for r in rows] == [("stop", True), ("start", True)]  # none rolled back

    # restart: acknowledged once a scheduler runs again, following the message
    restarted = launch.cli("ctl", "restart", a, "--wait", "30")
    assert restarted.returncode == 0 and "acknowledged: started" in restarted.stdout, (
        restarted.stdout + restarted.stderr)

    # a database no launcher runs: no acknowledgement, exit 1, no traceback
    lonely = f"sqlite:///{launch.dir / 'lonely.db'}"  # outside the launcher's glob
    launch.stator(lonely).migrate()
    other = launch.cli("ctl", "start", lonely, "--wait", "0.5", "--control", "elsewhere")
    assert other.returncode == 1 and "no acknowledgement within 0.5s" in other.stdout
    assert "Traceback" not in other.stderr
    with launch.stator(lonely).engine.begin() as conn:
        conn.execute(delete(messages_table))
        assert conn.execute(select(func.count()).select_from(messages_table)).scalar() == 0


def test_a_crashed_scheduler_is_regenerated_and_uninstall_disables(launch: Launch) -> None:
    a = launch.tenant("a", 40)
    launch.launcher(max_workers=2, sleep=0.2)  # slow handlers: the scheduler keeps running
    first = wait_until(lambda: launch.db(a).get("pid"), 60, "a running scheduler",
                       launch.describe)
    os.kill(first, signal.SIGKILL)
    crashed = wait_until(lambda: launch.db(a).get("restarts") == 1 and launch.db(a), 60,
                         "the crash counted", launch.describe)
    assert "killed by SIGKILL" in crashed["last_error"]
    wait_until(lambda: launch.db(a).get("pid") not in (None, first), 60,
               "a regenerated scheduler", launch.describe)
    wait_until(lambda: launch.done(a) == 40, 120, "all work done after the crash",
               launch.describe)

    removed = launch.cli("uninstall", "tenant_app:stator", "--db", a, "--yes")
    assert removed.returncode == 0, removed.stderr
    disabled = wait_until(lambda: launch.db(a).get("state") == "disabled" and launch.db(a),
                          60, "disabled after uninstall", launch.describe)
    assert "no Stator tables" in disabled["last_error"]
    assert disabled["restarts"] == 1  # a missing schema is not a crash

    assert launch.cli("migrate", "tenant_app:stator", "--db", a).returncode == 0
    wait_until(lambda: launch.db(a).get("state") != "disabled", 60, "enabled after migrate",
               launch.describe)
    launch.insert(a, 3, first=100)
    wait_until(lambda: launch.done(a) == 43, 60, "work after reinstall", launch.describe)


def test_one_launcher_per_control_place_and_leftovers_are_stopped(launch: Launch) -> None:
    a = launch.tenant("a", 3)
    first = launch.launcher(max_workers=2, sleep=600)  # a handler that outlives its launchers
    pid = wait_until(lambda: launch.db(a).get("pid"), 60, "a running scheduler",
                     launch.describe)
    wait_until(lambda: launch.db(a).get("proc_start"), 10, "the scheduler recorded")
    start = launch.db(a)["proc_start"]

    second = launch.launcher(max_workers=2)
    assert second.wait(60) == 2, second.describe()
    assert f"another launcher (pid {first.pid}) is running" in second.stderr()

    first.popen.send_signal(signal.SIGKILL)
    first.wait(30)
    assert is_our_scheduler(pid, start)  # still finishing its handler
    third = launch.launcher("--stop-grace", "1", max_workers=2)  # no need to wait it out
    wait_until(lambda: launch.state()["launcher"].get("pid") == third.pid, 60,
               "the new launcher's state", launch.describe)
    assert launch.state()["launcher"]["leftovers_stopped"] == 1
    assert not is_our_scheduler(pid, start)
    assert "left by a previous launcher" in third.stderr()


def test_busy_tenants_take_turns_in_one_slot(launch: Launch) -> None:
    # Each tenant has about 3.75 s of handler work (150 rows of 50 ms, two at a time); a
    # scheduler yields after 1.5 s (counted from its start, process start-up included) when
    # the other tenant waits, so neither can finish within its first turn.
    a = launch.tenant("a", 150)
    b = launch.tenant("b", 150)
    launcher = launch.launcher("--slice", "1.5", "--concurrency", "2", max_workers=2,
                               sleep=0.05)
    wait_until(lambda: launch.done(a) == 150 and launch.done(b) == 150, 180,
               "both tenants done through one slot", launch.describe)
    assert "yields its slot to a waiting database" in launcher.stderr()
    starts = [launch.db(url)["starts"] for url in (a, b)]
    assert sum(starts) >= 3 and min(starts) >= 1
    assert all(launch.db(url)["restarts"] == 0 for url in (a, b))  # yielding is no crash
