"""Time, injected.

Nothing in Stator asks the operating system for the wall-clock time except ``SystemClock``;
everything else receives a clock.  Tests pass a ``ManualClock`` and jump over retry intervals
instead of sleeping through them.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """What the engine needs to know about time: the current UTC instant."""

    def now(self) -> datetime: ...


class SystemClock:
    """The real wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that only moves when told to; safe to share between threads."""

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime.now(UTC)
        if start.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start time")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        """Move forward by ``seconds`` and return the new time."""
        if seconds < 0:
            raise ValueError("a ManualClock never goes backwards")
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, when: datetime) -> None:
        with self._lock:
            self._now = when.astimezone(UTC)


_handler_clock: ContextVar[Clock | None] = ContextVar("stator_handler_clock", default=None)


class handlers_see:  # a lower-case name: used as the function it was
    """Let the handler running inside see its worker's clock (``handler_now``).  A class,
    not a generator: it wraps every handler call."""

    __slots__ = ("_clock", "_token")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def __enter__(self) -> None:
        self._token = _handler_clock.set(self._clock)

    def __exit__(self, *exc: object) -> None:
        _handler_clock.reset(self._token)


def handler_now() -> datetime:
    """The time by the clock of the worker running the current handler, the system's outside
    one: times a handler stamps on its row (a task's start and finish) agree with the due
    times the engine writes, a test's ``ManualClock`` included."""
    clock = _handler_clock.get()
    return clock.now() if clock is not None else datetime.now(UTC)
