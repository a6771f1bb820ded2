"""SQLite keeps timestamps as UTC text; the engine formats them on its hot path, so the fast
spelling must match the plain one for every aware time, whatever its offset."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stator._time_text import from_sqlite_text, to_sqlite_text

offsets = st.integers(min_value=-23 * 60, max_value=23 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
aware = st.datetimes(
    min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31), timezones=offsets | st.just(UTC)
)


@given(aware)
def test_sqlite_text_is_the_utc_time_to_the_microsecond(value: datetime) -> None:
    expected = value.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")
    assert to_sqlite_text(value) == expected
    assert from_sqlite_text(to_sqlite_text(value)) == value


@given(aware, st.lists(st.integers(min_value=-2_000_000, max_value=2_000_000), max_size=20))
def test_times_close_together_share_no_text_they_should_not(
    value: datetime, steps: list[int]
) -> None:
    """One second's text is kept for the next time formatted (``_seconds``): times in
    the same second, the next one, or the same second of another minute, hour or day each
    get their own."""
    for step in steps:
        for near in (value + timedelta(microseconds=step), value + timedelta(days=step % 40),
                     value + timedelta(minutes=step % 90), value + timedelta(hours=step % 30)):
            expected = near.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")
            assert to_sqlite_text(near) == expected


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        to_sqlite_text(datetime(2026, 1, 1))
