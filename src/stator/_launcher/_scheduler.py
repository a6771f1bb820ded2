"""The scheduler's side: what ``stator launcher-scheduler`` does before and around the worker.

1. Follow the sender (TimescaleDB's "wait on the vxid"): a scheduler started for a ``restart``
   first makes sure it can see that message -- and so everything its sender committed.
2. Check the schema; none (or an outdated one) -> exit ``EXIT_NO_SCHEMA`` at once, and the
   launcher disables the database until a message.
3. Run the engine's worker until nothing is due within the idle window (exit 0: the
   launcher takes the slot back), until SIGTERM (graceful), or until the launcher dies
   (its lifeline pipe reads end-of-file: graceful too).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from . import _messages

FOLLOW_TIMEOUT = 10.0


def follow_sender(engine: Engine, message_id: int, timeout: float = FOLLOW_TIMEOUT) -> bool:
    """Wait (bounded) until message ``message_id`` is visible here.  The launcher only acts
    on committed messages, so this normally returns at once; it matters when this
    connection could lag behind the launcher's (a replica, a stale snapshot)."""
    deadline = time.monotonic() + timeout
    pause = 0.02
    while True:
        try:
            with engine.connect() as conn:
                if not _messages.has_table(conn) or _messages.is_visible(conn, message_id):
                    return True
        except SQLAlchemyError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def watch_lifeline(fd: int, on_close: Callable[[], None]) -> threading.Thread:
    """Call ``on_close`` when the launcher's end of the pipe closes (it exited or died)."""

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 1):
                pass
        on_close()

    thread = threading.Thread(target=watch, name="stator-lifeline", daemon=True)
    thread.start()
    return thread
