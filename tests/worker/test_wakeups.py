"""The wake-up listener on its own: it wakes the worker when another connection commits
work (SQLite: a change of ``data_version``; PostgreSQL: a notification naming one of the
worker's tables, after its own probe came back), and a stop ends it at once."""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import pytest

from stator import SystemClock
from stator._store import NOTIFY_CHANNEL
from stator._worker import _listener
from stator._worker._listener import Listener
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
