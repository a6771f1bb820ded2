"""The launcher's parts that touch the outside world, one at a time, in-process:
discovery (SQLite globs, a PostgreSQL server, explicit URLs), the control place (lock,
state file, wake-up FIFO), scheduler output and leftover recognition."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stator import ConfigError
from stator._launcher._children import (
    SCHEDULER_COMMAND,
    is_our_scheduler,
    log_tail,
    proc_start_time,
)
from stator._launcher._discovery import (
    discover_source,
    explicit_source,
    key_of,
    normalize,
)
from stator._launcher._place import LauncherRunning, Place, poke
from stator._launcher._report import status_report

from .conftest import PgTenants, wait_until


def test_normalize_makes_one_name_per_database(tmp_path: Path) -> None:
    assert key_of(normalize("sqlite:///t/a.db", tmp_path)) == f"sqlite:///{tmp_path}/t/a.db"
    assert key_of(normalize(f"sqlite:///{tmp_path}/t/../t/a.db")) == (
        f"sqlite:///{tmp_path}/t/a.db")
    pg = normalize("postgresql://u:secret@h:5433/db")
    assert pg.drivername == "postgresql+psycopg"
    assert key_of(pg) == "postgresql+psycopg://u:***@h:5433/db"
    for bad in ("mysql://h/db", "sqlite://", "sqlite:///:memory:", "nonsense"):
        with pytest.raises(ConfigError):
            normalize(bad)
    with pytest.raises(ConfigError, match="--discover"):
        explicit_source("sqlite:///t/*.db", tmp_path)


def test_sqlite_glob_sees_new_files_and_forgets_removed_ones(tmp_path: Path) -> None:
    source = discover_source("sqlite:///tenants/*.db", tmp_path)
    assert source.scan() == {}
    (tmp_path / "tenants").mkdir()
    for name in ("a.db", "b.db", "a.db-wal", "a.db-shm", "notes.txt"):
        (tmp_path / "tenants" / name).write_bytes(b"")
    (tmp_path / "tenants" / "dir.db").mkdir()
    found = source.scan()
    assert sorted(found) == [f"sqlite:///{tmp_path}/tenants/{n}" for n in ("a.db", "b.db")]
    assert found[f"sqlite:///{tmp_path}/tenants/a.db"].path == tmp_path / "tenants" / "a.db"
    os.remove(tmp_path / "tenants" / "a.db")
    assert sorted(source.scan()) == [f"sqlite:///{tmp_path}/tenants/b.db"]


def test_an_explicit_sqlite_file_counts_once_it_exists(tmp_path: Path) -> None:
    source = explicit_source("sqlite:///one.db", tmp_path)
    assert source.scan() == {}
    (tmp_path / "one.db").write_bytes(b"")
    assert list(source.scan()) == [f"sqlite:///{tmp_path}/one.db"]


def test_postgresql_server_discovery_follows_create_and_drop(pg_tenants: PgTenants) -> None:
    source = discover_source(pg_tenants.pattern)
    assert source.scan() == {}
    a = pg_tenants.create("a")
    b = pg_tenants.create("b")
    pg_tenants.admin.execute(
        f'CREATE DATABASE "{pg_tenants.prefix}tpl" IS_TEMPLATE true')
    pg_tenants.made.append(f"{pg_tenants.prefix}tpl")
    pg_tenants.admin.execute(f'CREATE DATABASE "{pg_tenants.prefix}closed" ALLOW_CONNECTIONS false')
    pg_tenants.made.append(f"{pg_tenants.prefix}closed")
    found = source.scan()
    assert sorted(found) == sorted(key_of(normalize(u)) for u in (a, b))  # no template, no
    pg_tenants.drop(b)                                                    # closed database
    assert sorted(source.scan()) == [key_of(normalize(a))]


def test_one_launcher_per_control_place(tmp_path: Path) -> None:
    first, second = Place(tmp_path / "ctl"), Place(tmp_path / "ctl")
    assert not first.held_by_someone()
    first.acquire()
    try:
        assert second.held_by_someone()
        with pytest.raises(LauncherRunning, match=rf"another launcher \(pid {os.getpid()}\)"):
            second.acquire()
    finally:
        first.release()
    assert not second.held_by_someone()
    second.acquire()
    second.release()


def test_state_file_and_status_report(tmp_path: Path) -> None:
    place = Place(tmp_path / "ctl")
    with pytest.raises(ConfigError, match="no launcher state"):
        status_report(tmp_path / "ctl")
    place.acquire()
    try:
        place.write_state({"launcher": {"pid": os.getpid()}, "databases": [
            {"database": "sqlite:///x.db", "pid": 123, "started_at": "2020-01-01T00:00:00+00:00"},
            {"database": "sqlite:///y.db", "pid": None, "started_at": None},
        ]})
        report = status_report(tmp_path / "ctl")
        assert report["launcher"]["running"] is True
        assert report["databases"][0]["uptime"] > 0 and report["databases"][1]["uptime"] is None
    finally:
        place.release()
    report = status_report(tmp_path / "ctl")
    assert report["launcher"]["running"] is False and report["databases"][0]["pid"] is None


def test_the_wake_up_fifo_carries_database_names(tmp_path: Path) -> None:
    place = Place(tmp_path / "ctl")
    assert poke(place.path, "sqlite:///a.db") is False  # nobody there
    place.acquire()
    try:
        place.open_wake()
        assert place.read_wake() == []
        assert poke(place.path, "sqlite:///a.db") and poke(place.path, "sqlite:///b.db")
        assert place.read_wake() == ["sqlite:///a.db", "sqlite:///b.db"]
        assert place.read_wake() == []
    finally:
        place.release()
    assert poke(place.path, "sqlite:///a.db") is False  # FIFO left behind, nobody reading


def test_log_tail_finds_the_last_runs_error(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    assert log_tail(log) == ""
    log.write_text("--- start\nerror: old problem\n--- start\nINFO working\n"
                   "Traceback (most recent call last):\n  File ...\nValueError: boom\n")
    assert log_tail(log) == "ValueError: boom"
    with log.open("a") as f:
        f.write("--- start\nerror: the database has no Stator tables: run migrate\n")
    assert log_tail(log) == "the database has no Stator tables: run migrate"
    with log.open("a") as f:
        f.write("--- start\n")
    assert log_tail(log) == ""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_leftover_is_recognised_by_pid_start_time_and_command() -> None:
    own = proc_start_time(os.getpid())
    assert own is not None
    assert not is_our_scheduler(os.getpid(), own)  # not a scheduler command line
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                              SCHEDULER_COMMAND])
    try:
        start = proc_start_time(child.pid)
        # Right after a vfork-based exec, /proc/PID/cmdline can still read empty.
        wait_until(lambda: is_our_scheduler(child.pid, start), 10, "the command line")
        assert not is_our_scheduler(child.pid, None)
        assert not is_our_scheduler(child.pid, "0")  # a recycled pid would differ here
    finally:
        child.kill()
        child.wait()
    assert not is_our_scheduler(child.pid, start)


def test_the_launcher_listener_restarts_after_dying_and_says_so(monkeypatch, caplog) -> None:
    """Item 15: a listening loop that dies is restarted (with backoff) and logged at WARNING."""
    import logging
    import threading

    from stator._launcher import _listener

    runs: list[int] = []
    restarted = threading.Event()

    def run(self: _listener.Listener) -> None:
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("select failed")
        restarted.set()

    monkeypatch.setattr(_listener.Listener, "_run", run)
    monkeypatch.setattr(_listener, "RETRY_FIRST", 0.01)
    with caplog.at_level(logging.WARNING, logger="stator.launcher"):
        listener = _listener.Listener(lambda: None)
        try:
            assert restarted.wait(30)
        finally:
            listener.close()
    assert any("wake-up listener stopped" in r.getMessage() for r in caplog.records)


def test_the_launcher_says_it_needs_posix_where_fcntl_is_missing() -> None:
    """Item 17: a clear ImportError instead of 'No module named fcntl'."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['fcntl'] = None\n"
            "try:\n    import stator.launcher\n"
            "except ImportError as exc:\n    print(exc)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)
    assert "needs a POSIX system" in result.stdout, result.stdout + result.stderr
