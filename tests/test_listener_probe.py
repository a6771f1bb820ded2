"""The wake-up listener's probe is patient: a test notification that is only late (a loaded
machine, a slow link: what the namespace tests put workers through) makes the worker poll
for a while, never for ever.  Once it arrives the worker wakes on notifications alone again,
and a reconnected listener does not probe again."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from stator import State, StateGraph, SystemClock
from stator._store import NOTIFY_CHANNEL
from stator._worker import _listener
from test_worker import running, wait_until


class Idle(StateGraph):
    new = State(externally_progressed=True)
    done = State()
    new.transitions_to(done)


def test_a_late_probe_notification_ends_polling(
    backend: str, build_models: Any, make_stator: Any, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if not backend.startswith("postgresql"):
        pytest.skip("notifications are PostgreSQL's")
    monkeypatch.setattr(_listener, "PROBE_TIMEOUT", 0.3)
    monkeypatch.setattr(_listener, "POLL_WITHOUT_NOTIFY", 0.1)
    m = build_models(Idle)
    stator = make_stator(backend, [m.Order], SystemClock())
    worker = stator.worker()
    # The late notification goes over a connection of its own, closed at once: none of the
    # engine's pooled connections may still be out when the test's engine is disposed.
    listen = worker.store.listen_connection
    release = threading.Event()
    sent: list[str] = []

    senders: list[threading.Thread] = []

    def late(payload: str) -> None:  # held back until the worker has given up waiting
        def deliver() -> None:
            release.wait(60)
            with listen() as conn:
                conn.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, payload])
            sent.append(payload)

        sender = threading.Thread(target=deliver, daemon=True)
        senders.append(sender)
        sender.start()

    monkeypatch.setattr(worker.store, "send_notification", late)
    caplog.set_level(logging.WARNING, logger="stator.worker")

    def actions() -> list[str]:
        return [getattr(r, "action", "") for r in caplog.records]

    with running(worker):
        wait_until(lambda: "listen_polling" in actions(), "the worker to fall back to polling")
        assert not worker._listener.notify_proven
        release.set()
        wait_until(lambda: worker._listener.notify_proven, "the late notification to be noticed")
        wait_until(lambda: "listen_notified" in actions(), "the worker to say so")
    for thread in [*senders, *threading.enumerate()]:  # every connection closed before the
        if thread is senders[0] or thread.name == "stator-listener":  # test's engine goes
            thread.join(30)
    assert actions().count("listen_polling") == 1
    assert len(sent) == 1
