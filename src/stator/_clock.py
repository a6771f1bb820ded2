"""Time, injected.

Nothing in Stator asks the operating system for the wall-clock time except ``SystemClock``;
everything else receives a clock.  Tests pass a ``ManualClock`` and jump over retry intervals
instead of sleeping through them.
"""

from __future__ import annotations

import threading
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
