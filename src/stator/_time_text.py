"""A time as SQLite keeps it: fixed-width ``YYYY-MM-DD HH:MM:SS.ffffff`` UTC text, which
sorts in time order and compares correctly with what SQLite's own ``strftime`` writes for
rows inserted by raw SQL.

A leaf: the dialects (``_store/_dialects/``) and the column type (``_types.py``) both
spell times this way, and neither need import the other for it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

SQLITE_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


# The last two seconds formatted, each as its start, its end and its text up to the
# microseconds' point, the latest first: one tuple, replaced whole, so a thread reading it
# sees each second's bounds with its own text, never another's.  Two, because a write-back
# row alternates between two seconds (its change time, and its due time days later).  At
# first, none (no time is both at least the latest and before it).
_LATEST = datetime.max.replace(tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_NONE = (_LATEST, _LATEST, "")
_seconds: tuple[tuple[datetime, datetime, str], tuple[datetime, datetime, str]] = (_NONE, _NONE)


def to_sqlite_text(value: datetime) -> str:
    global _seconds
    zone = value.tzinfo
    if zone is not UTC:
        if zone is None:
            raise ValueError(f"naive datetime {value!r}: Stator stores only timezone-aware times")
        value = value.astimezone(UTC)
    # The times written close together (a batch's) mostly share their second: its text is
    # kept, and only the microseconds formatted (a tenth of ``strftime``'s cost).  Whether
    # the time is in that second is two comparisons, less than taking its fields apart.
    latest, other = _seconds
    if latest[0] <= value < latest[1]:
        prefix = latest[2]
    elif other[0] <= value < other[1]:
        prefix = other[2]
    else:
        start = value.replace(microsecond=0)
        prefix = value.isoformat(" ", "seconds")[:19] + "."
        try:
            end = start + _SECOND
        except OverflowError:  # the last second there is: formatted anew each time
            end = start
        _seconds = ((start, end, prefix), latest)
    return prefix + str(value.microsecond).zfill(6)


def from_sqlite_text(value: str) -> datetime:
    if len(value) == 26 and value[19] == ".":
        # The fixed-width form ``to_sqlite_text`` writes: parsed with its offset appended, one
        # datetime made (with ``UTC`` itself as its zone) instead of two; about 6x faster.
        return datetime.fromisoformat(value + "+00:00")
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


class TimeTexts:
    """``format`` (a time as a database's parameter) for one batch, each distinct time
    formatted once (a claim's rows share their lease, a move's due time is often its change
    time); None stays None."""

    __slots__ = ("_format", "_seen")

    def __init__(self, format: Callable[[datetime], Any]) -> None:
        self._format = format
        self._seen: dict[datetime, Any] = {}

    def __call__(self, value: datetime | None) -> Any:
        if value is None:
            return None
        text = self._seen.get(value)
        if text is None:
            text = self._seen[value] = self._format(value)
        return text
