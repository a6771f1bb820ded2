"""The worker board: one object that every thread of a worker reports its state to
(after HarvestMan's design).

Threads never poll each other.  They report state changes here; whoever needs to react (the
coordinator, the main thread watching for signals) waits on the board's condition and is
woken by the report.  The board also counts rows handed out and taken back, so "the worker
is quiet" is a count, not a guess from queue lengths.
"""

from __future__ import annotations

import threading
from enum import StrEnum


class ThreadState(StrEnum):
    IDLE = "idle"  # created, not started
    WAITING = "waiting"  # nothing to do until woken
    CLAIMING = "claiming"
    RUNNING = "running"  # inside a handler
    WRITING = "writing"  # writing results back
    DIED = "died"  # ended by an unexpected exception (it will be replaced)
    ABANDONED = "abandoned"  # stuck in a handler past its deadline (replaced; exits later)
    STOPPED = "stopped"


class Board:
    def __init__(self) -> None:
        # The condition's own lock, taken directly but for ``wait``: the same lock (notify
        # needs it held), without the Python call each way that entering the ``Condition``
        # adds (``take_back`` runs once per row).
        self._lock = threading.Lock()
        self.condition = threading.Condition(self._lock)
        self._states: dict[str, ThreadState] = {}
        self.handed_out = 0  # rows given to handler threads
        self.taken_back = 0  # rows whose outcome came back

    def report(self, thread: str, state: ThreadState, notify: bool = True) -> None:
        """Record a thread's new state.  Routine states (waiting/running) are recorded without
        waking anyone; the ones a watcher must act on (died, abandoned, stopped) wake it."""
        with self._lock:
            self._states[thread] = state
            if notify:
                self.condition.notify_all()

    def state_of(self, thread: str) -> ThreadState | None:
        with self._lock:
            return self._states.get(thread)

    def forget(self, thread: str) -> None:
        with self._lock:
            self._states.pop(thread, None)
            self.condition.notify_all()

    def hand_out(self, count: int = 1) -> None:
        with self._lock:
            self.handed_out += count

    def take_back(self, count: int = 1) -> None:
        with self._lock:
            self.taken_back += count
            if self.taken_back == self.handed_out:  # quiet: the one moment a watcher cares
                self.condition.notify_all()

    def snapshot(self) -> dict[str, str]:
        with self._lock:
            return {name: str(state) for name, state in sorted(self._states.items())}

    def outstanding(self) -> int:
        with self._lock:
            return self.handed_out - self.taken_back

    def wait(self, timeout: float) -> None:
        """Sleep until some thread reports, or ``timeout`` passes (signals still arrive)."""
        with self.condition:
            self.condition.wait(timeout)

    def poke(self) -> None:
        with self._lock:
            self.condition.notify_all()
