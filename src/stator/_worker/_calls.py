"""The coordinator's database calls, on a thread of their own (see ``Worker._guarded``)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class Calls:
    """A daemon thread running the coordinator's database calls one at a time; ``done`` runs
    in it as it ends (the store's per-thread cleanup)."""

    def __init__(self, done: Callable[[], None]) -> None:
        self._done = done
        self._calls: queue.SimpleQueue[
            tuple[Callable[[], Any], Future[Any]] | None
        ] = queue.SimpleQueue()
        threading.Thread(target=self._main, name="stator-db-calls", daemon=True).start()

    def submit(self, action: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self._calls.put((action, future))
        return future

    def close(self) -> None:
        self._calls.put(None)

    def _main(self) -> None:
        try:
            while (call := self._calls.get()) is not None:
                action, future = call
                try:
                    future.set_result(action())
                except BaseException as exc:
                    future.set_exception(exc)
        finally:
            self._done()
