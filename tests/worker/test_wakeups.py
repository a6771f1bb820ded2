"""The wake-up listener on its own: it wakes the worker when another connection commits
work (SQLite: a change of ``data_version``; PostgreSQL: a notification naming one of the
worker's tables, after its own probe came back), and a stop ends it at once."""

from __future__ import annotations

import logging
import os
import select
import sqlite3
import struct
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from inotify_simple import parse_events

from stator import SystemClock
from stator._store import NOTIFY_CHANNEL, Heartbeat
from stator._worker import _listener
from stator._worker._file_events import FileEvents
from stator._worker._listener import Listener, SqliteWatch
from stator._worker._state import Signals

from .parts import PATIENCE, Quick, wait_for


def make_listener(stator: Any) -> tuple[Listener, Signals, threading.Event]:
    signals = Signals()
    woken = threading.Event()
    (tracked,) = stator.store.tracked
    listener = Listener(stator.store, signals, woken.set, {tracked.name}, None, "test-listener")
    return listener, signals, woken


def stop(listener: Listener, signals: Signals) -> None:
    signals.stop.set()
    listener.interrupt()
    listener.join()


def test_a_commit_from_another_connection_wakes_the_worker_sqlite(
    backend: str, build_models: Any, make_stator: Any
) -> None:
    if not backend.startswith("sqlite"):
        pytest.skip("data_version is SQLite's")
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], SystemClock())
    listener, signals, woken = make_listener(stator)
    path = stator.store.sqlite_path()
    other = sqlite3.connect(path)
    listener.start()
    try:
        commits = [0]

        def commit() -> None:  # until the listener has read a first version to compare with
            commits[0] += 1
            other.execute("INSERT INTO orders (id, state) VALUES (?, 'new')", (commits[0],))
            other.commit()
            woken.wait(1.0)

        wait_for(woken.is_set, "a commit to wake the worker", commit)
    finally:
        other.close()
        stop(listener, signals)


def beat(stator: Any, worker_id: str = "test-listener") -> Heartbeat:
    now = stator.clock.now()
    return Heartbeat(worker_id, now, now, 1, ("orders",), {}, 1)


def test_the_workers_own_heartbeats_do_not_read_as_a_change_sqlite(
    backend: str, build_models: Any, make_stator: Any
) -> None:
    """A heartbeat written on the listener's connection is no reason to look for work (an
    idle worker woke for a claim round after each), unlike one of any other connection."""
    if not backend.startswith("sqlite"):
        pytest.skip("data_version is SQLite's")
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], SystemClock())
    watch = SqliteWatch(stator.store.sqlite_path())
    try:
        assert not watch.changed()  # the first read: nothing to compare with
        for _ in range(3):
            assert watch.write(lambda books: books.heartbeat(beat(stator)))
            assert not watch.changed()
        stator.store.heartbeat(beat(stator, "another"))  # the driver's own connections
        assert watch.changed()
        assert {w.id for w in stator.store.workers()} == {"test-listener", "another"}
    finally:
        watch.close()


@pytest.mark.parametrize("order", ["theirs-first", "ours-first"])
def test_a_commit_of_another_connection_beside_our_own_heartbeat_still_wakes_sqlite(
    backend: str, build_models: Any, make_stator: Any, order: str
) -> None:
    """Safety line: skipping our own commits never swallows another process's commit, even
    one that lands between two reads together with our own heartbeat."""
    if not backend.startswith("sqlite"):
        pytest.skip("data_version is SQLite's")
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], SystemClock())
    path = stator.store.sqlite_path()
    watch = SqliteWatch(path)
    other = sqlite3.connect(path)
    try:
        watch.changed()

        def theirs() -> None:
            other.execute("INSERT INTO orders (id, state) VALUES (1, 'new')")
            other.commit()

        def ours() -> None:
            assert watch.write(lambda books: books.heartbeat(beat(stator)))

        for step in (theirs, ours) if order == "theirs-first" else (ours, theirs):
            step()
        assert watch.changed()
        assert not watch.changed()  # seen once
    finally:
        other.close()
        watch.close()


def test_the_listener_writes_unseen_only_while_it_polls_sqlite(
    backend: str, build_models: Any, make_stator: Any
) -> None:
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], SystemClock())
    listener, signals, woken = make_listener(stator)

    def heartbeat(books: Any) -> None:
        books.heartbeat(beat(stator))

    assert not listener.write_unseen(heartbeat)  # not started: the caller writes as usual
    listener.start()
    try:
        if backend.startswith("sqlite"):
            wait_for(lambda: listener.write_unseen(heartbeat), "the listener to poll",
                     lambda: woken.wait(0.01))
            assert [w.id for w in stator.store.workers()] == ["test-listener"]
        else:
            assert not listener.write_unseen(heartbeat)  # PostgreSQL: no such connection
    finally:
        stop(listener, signals)
    assert not listener.write_unseen(heartbeat)


def commit_elsewhere(path: str, pk: int = 1) -> None:
    other = sqlite3.connect(path)
    try:
        other.execute("INSERT INTO orders (id, state) VALUES (?, 'new')", (pk,))
        other.commit()
    finally:
        other.close()


def polling(listener: Listener, woken: threading.Event) -> None:
    """Wait until the SQLite listener has read its first version (its connection is set)."""
    wait_for(lambda: listener.write_unseen(lambda books: None), "the listener to poll",
             lambda: woken.wait(0.01))


def test_a_commit_wakes_the_worker_through_file_events_sqlite(
    backend: str, build_models: Any, make_stator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the kernel reports writes (inotify), the listener checks at once after one,
    instead of ten times a second; the slow poll is kept out of this test's way."""
    if not backend.startswith("sqlite"):
        pytest.skip("data_version is SQLite's")
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], SystemClock())
    path = stator.store.sqlite_path()
    probe = FileEvents.open(path)
    if probe is None:
        pytest.skip("no inotify here")
    probe.close()
    monkeypatch.setattr(_listener, "SQLITE_SLOW_POLL", 120.0)
    listener, signals, woken = make_listener(stator)
    listener.start()
    try:
        polling(listener, woken)
        woken.clear()
        commit_elsewhere(path)
        assert woken.wait(PATIENCE)
    finally:
        stop(listener, signals)


def fake_events(monkeypatch: pytest.MonkeyPatch, path: str) -> int:
    """File events from a pipe the test writes (none unless it does); its write end."""
    read, write = os.pipe()
    os.set_blocking(read, False)
    base = os.path.basename(path)
    monkeypatch.setattr(FileEvents, "open", classmethod(
        lambda cls, _path: cls(_PipeINotify(read), {base, f"{base}-wal"}, 0x4000)))
    return write


class _PipeINotify:
    """What ``FileEvents`` reads of an ``inotify_simple.INotify``, over the test's pipe."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def read(self, timeout: int) -> list[Any]:
        try:
            return parse_events(os.read(self.fd, 65536))
        except BlockingIOError:
            return []

    def close(self) -> None:
        pass


def test_a_commit_whose_file_event_is_missed_is_seen_by_the_slow_poll_sqlite(
    backend: str, build_models: Any, make_stator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Safety line: file events only hint (one may come before the commit is visible, or
    never): the slow poll still finds the commit."""
    if not backend.startswith("sqlite"):
        pytest.skip("data_version is SQLite's")
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], SystemClock())
    path = stator.store.sqlite_path()
    write_end = fake_events(monkeypatch, path)  # never written: no event comes
    monkeypatch.setattr(_listener, "SQLITE_SLOW_POLL", 0.05)
    listener, signals, woken = make_listener(stator)
    listener.start()
    try:
        polling(listener, woken)
        woken.clear()
        commit_elsewhere(path)
        assert woken.wait(PATIENCE)
    finally:
        stop(listener, signals)
        os.close(write_end)


def test_after_a_file_event_the_listener_looks_again_until_the_commit_shows_sqlite(
    backend: str, build_models: Any, make_stator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Safety line: a commit's pages are written (the event) a moment before the commit is
    visible; a first look that sees nothing is followed by more."""
    if not backend.startswith("sqlite"):
        pytest.skip("data_version is SQLite's")
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], SystemClock())
    path = stator.store.sqlite_path()
    write_end = fake_events(monkeypatch, path)
    monkeypatch.setattr(_listener, "SQLITE_SLOW_POLL", 120.0)
    monkeypatch.setattr(_listener, "SQLITE_LOOKS", (0.01,) * 10**5)  # as long as needed
    listener, signals, woken = make_listener(stator)
    listener.start()
    try:
        polling(listener, woken)
        name = os.fsencode(os.path.basename(path) + "-wal") + b"\0"
        os.write(write_end, struct.pack("iIII", 1, 0x002, 0, len(name)) + name)
        read_end = FileEvents.open(path).fileno()  # the listener's (the same pipe)
        wait_for(lambda: not select.select([read_end], [], [], 0)[0],
                 "the listener to take the event", lambda: woken.wait(0.01))
        woken.clear()
        commit_elsewhere(path)  # visible only after the event's first look
        assert woken.wait(PATIENCE)
    finally:
        stop(listener, signals)
        os.close(write_end)


def test_a_notification_wakes_the_worker_postgresql(
    backend: str, build_models: Any, make_stator: Any
) -> None:
    if not backend.startswith("postgresql"):
        pytest.skip("notifications are PostgreSQL's")
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], SystemClock())
    listener, signals, woken = make_listener(stator)
    (tracked,) = stator.store.tracked
    listener.start()
    try:
        wait_for(lambda: listener.notify_proven, "the listener's probe to come back",
                 lambda: woken.wait(0.1))
        woken.clear()  # LISTEN itself wakes once (for anything committed before it)
        with stator.store.listen_connection() as conn:  # another process's commit, as seen
            conn.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, tracked.name])
        assert woken.wait(PATIENCE)
    finally:
        stop(listener, signals)


def test_a_stop_ends_the_listener_at_once(
    backend: str, build_models: Any, make_stator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_listener, "LISTEN_WAIT", 120.0)  # a stop must not wait these out
    monkeypatch.setattr(_listener, "SQLITE_POLL", 120.0)
    monkeypatch.setattr(_listener, "LISTENER_JOIN", PATIENCE)
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], SystemClock())
    listener, signals, woken = make_listener(stator)
    listener.start()
    if backend.startswith("postgresql"):
        wait_for(lambda: listener.notify_proven, "the listener's probe to come back",
                 lambda: woken.wait(0.1))
    stop(listener, signals)
    alive = [t.name for t in threading.enumerate() if t.name == "stator-listener"]
    assert alive == []


def test_no_file_events_is_said_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """An install without inotify_simple still works (it polls), but says so: otherwise
    its 0.1 s pickup and its ten wake-ups a second would have no visible cause."""
    if not sys.platform.startswith("linux"):
        pytest.skip("file events are Linux's")
    monkeypatch.setitem(sys.modules, "inotify_simple", None)  # import fails
    with caplog.at_level(logging.INFO, logger="stator.worker"):
        assert FileEvents.open(str(tmp_path / "db.sqlite3")) is None
    (record,) = [r for r in caplog.records if "no file events" in r.getMessage()]
    assert "inotify_simple is not installed" in record.getMessage()
