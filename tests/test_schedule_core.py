"""The pure part of periodic schedules (``stator._schedule``): definitions, ticks, DST
nights and the missed-tick policies, with properties checked by hypothesis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from stator._schedule import (
    COUNT_LIMIT,
    ON_TIME,
    Plan,
    Schedule,
    from_definition,
    next_tick,
    parse,
    plan,
)
from stator.errors import ConfigError

PARIS = ZoneInfo("Europe/Paris")
EXPRESSIONS = ["30 2 * * *", "0 3 * * 1-5", "*/30 * * * *", "15 * * * *", "0 */2 * * *",
               "45 1 * * 0", "*/7 2 * * *", "0 9 * * 1-5"]
ZONES = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
# Around both of Paris's and New York's clock changes of 2026, and an ordinary week.
STARTS = [datetime(2026, 3, 7, tzinfo=UTC), datetime(2026, 3, 27, tzinfo=UTC),
          datetime(2026, 10, 23, tzinfo=UTC), datetime(2026, 10, 30, tzinfo=UTC),
          datetime(2026, 6, 1, tzinfo=UTC)]


def cron(expr: str, zone: str = "UTC", **extra: object) -> Schedule:
    return parse("s", {"task": "app.tasks.f", "cron": expr, "timezone": zone, **extra})


def every(seconds: float, **extra: object) -> Schedule:
    return parse("s", {"task": "app.tasks.f", "every": seconds, **extra})


def truth(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """The ticks in (start, end] as one continuous run of cronsim gives them."""
    assert schedule.cron
    ticks = []
    for tick in CronSim(schedule.cron, start.astimezone(ZoneInfo(schedule.timezone))):
        utc = tick.astimezone(UTC)
        if utc > end:
            return ticks
        if utc > start:
            ticks.append(utc)
    return ticks


moments = st.builds(
    lambda base, minutes: base + timedelta(minutes=minutes),
    st.sampled_from(STARTS), st.floats(min_value=0, max_value=6 * 24 * 60),
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(EXPRESSIONS), st.sampled_from(ZONES), moments)
def test_next_tick_is_the_continuous_runs_next(expr: str, zone: str, after: datetime) -> None:
    """Computed afresh from any moment (as a worker does, from the row), the next tick is the
    one a single uninterrupted run of the expression reaches next: no tick of a repeated
    hour is skipped or repeated by starting inside it."""
    schedule = cron(expr, zone)
    early = after - timedelta(hours=30)
    expected = [t for t in truth(schedule, early, after + timedelta(days=9)) if t > after]
    assert next_tick(schedule, after) == expected[0]


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(st.sampled_from(EXPRESSIONS).map(lambda e: ("cron", e)),
              st.sampled_from([45, 90, 3600, 86_400, 150.5]).map(lambda s: ("every", s))),
    st.sampled_from(ZONES), st.sampled_from(STARTS),
    st.lists(st.floats(min_value=0, max_value=400), min_size=1, max_size=30),
)
def test_firing_over_time_fires_every_tick_once(
    how: tuple[str, object], zone: str, start: datetime, gaps: list[float]
) -> None:
    """A row fired at any moments (workers late, down, many at once), each firing starting
    from the next tick the last one wrote: with ``missed="all"`` every tick fires exactly
    once and in order; ``next`` is always after ``now``."""
    kind, value = how
    extra = {"missed": "all", "max_catch_up": 10_000}
    schedule = cron(str(value), zone, **extra) if kind == "cron" else every(value, **extra)  # type: ignore[arg-type]
    due = next_tick(schedule, start)
    now = start
    fired: list[datetime] = []
    for gap in gaps:
        now += timedelta(minutes=gap)
        result = plan(schedule, due, now)
        assert result.next > now
        assert all(due <= t <= now for t in result.fire)
        assert result.missed == 0
        fired.extend(result.fire)
        due = result.next
    assert fired == sorted(set(fired))
    first = next_tick(schedule, start)
    if kind == "cron":
        expected = [t for t in truth(schedule, start, now) if t >= first]
    else:
        step = timedelta(seconds=float(value))  # type: ignore[arg-type]
        expected = []
        tick = first
        while tick <= now:
            expected.append(tick)
            tick += step
    assert fired == expected


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["skip", "once", "all"]), st.integers(1, 5), st.integers(0, 50),
       st.floats(min_value=0, max_value=59.9))
def test_missed_policies(policy: str, cap: int, missed_ticks: int, late: float) -> None:
    """After downtime the policy decides: ``skip`` fires the newest due tick only if it is on
    time, ``once`` fires the newest, ``all`` the newest ``max_catch_up``; every other due tick
    is counted as missed; nothing before the row's next tick fires."""
    extra: dict[str, object] = {"missed": policy}
    if policy == "all":
        extra["max_catch_up"] = cap
    schedule = every(60, **extra)
    due = datetime(2026, 1, 1, tzinfo=UTC)
    newest = due + timedelta(minutes=missed_ticks)
    now = newest + timedelta(seconds=late)
    result = plan(schedule, due, now)
    total = missed_ticks + 1
    expected = {"skip": 1, "once": 1, "all": min(cap, total)}[policy]
    assert result.fire[-1] == newest
    assert len(result.fire) == expected
    assert result.missed == total - expected
    assert result.next == newest + timedelta(minutes=1)


def test_skip_drops_a_late_tick() -> None:
    schedule = every(3600, missed="skip")
    due = datetime(2026, 1, 1, tzinfo=UTC)
    result = plan(schedule, due, due + ON_TIME + timedelta(seconds=1))
    assert result.fire == () and result.missed == 1
    assert result.next == due + timedelta(hours=1)


def test_default_policy_is_once_and_a_new_row_fires_nothing() -> None:
    schedule = every(60)
    assert schedule.missed == "once"
    now = datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)
    fresh = plan(schedule, None, now)
    assert fresh.fire == () and fresh.next == datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    assert plan(schedule, fresh.next, now) == fresh  # not due yet: nothing changes


def test_long_downtime_is_bounded() -> None:
    """A minutely cron down for a year: the newest ticks are found without walking the
    year, the count stops at its cap."""
    schedule = cron("* * * * *", missed="all", max_catch_up=3)
    due = datetime(2025, 1, 1, tzinfo=UTC)
    now = datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)
    result = plan(schedule, due, now)
    newest = datetime(2026, 1, 1, tzinfo=UTC)
    assert result.fire == tuple(newest - timedelta(minutes=2 - i) for i in range(3))
    assert result.missed == COUNT_LIMIT - 3
    assert result.next == datetime(2026, 1, 1, 0, 1, tzinfo=UTC)


def paris_ticks(expr: str, day: datetime, hours: float = 24) -> list[datetime]:
    schedule = cron(expr, "Europe/Paris", missed="all", max_catch_up=1000)
    result = plan(schedule, next_tick(schedule, day), day + timedelta(hours=hours))
    return [t.astimezone(PARIS) for t in result.fire]


def test_dst_spring_night_fixed_time_runs_once_when_the_clock_jumps() -> None:
    """29 March 2026: Paris jumps from 02:00 to 03:00; a 02:30 job runs once, at 03:00."""
    ticks = paris_ticks("30 2 * * *", datetime(2026, 3, 28, 12, tzinfo=UTC))
    assert ticks == [datetime(2026, 3, 29, 3, 0, tzinfo=PARIS)]


def test_dst_autumn_night_fixed_time_runs_once() -> None:
    """25 October 2026: 02:00-03:00 happens twice; a 02:30 job runs once, the first time."""
    ticks = paris_ticks("30 2 * * *", datetime(2026, 10, 24, 12, tzinfo=UTC))
    assert [t.astimezone(UTC) for t in ticks] == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC)]


def test_dst_autumn_night_stepped_job_follows_real_time() -> None:
    """A half-hourly job runs in both copies of the repeated hour: 50 runs that local day,
    which lasts 25 hours."""
    midnight = datetime(2026, 10, 25, tzinfo=PARIS).astimezone(UTC)
    ticks = paris_ticks("*/30 * * * *", midnight - timedelta(seconds=1), 25)
    assert len(ticks) == 50
    assert len({t.astimezone(UTC) for t in ticks}) == 50


def test_every_ignores_the_clock_change() -> None:
    schedule = every(3600, missed="all", max_catch_up=100)
    start = datetime(2026, 10, 24, 12, tzinfo=UTC)
    result = plan(schedule, next_tick(schedule, start), start + timedelta(days=1))
    assert len(result.fire) == 24
    assert all(t.minute == 0 and t.second == 0 for t in result.fire)


def test_definition_round_trips_and_names_itself() -> None:
    schedule = parse("nightly", {
        "task": "app.tasks.cleanup", "cron": "30  3 * * 1-5", "args": [1], "kwargs": {"a": 2},
        "timezone": "Europe/Paris", "queue": "mail", "priority": 3, "missed": "all",
        "max_catch_up": 5,
    })
    assert schedule.cron == "30 3 * * 1-5"
    again = from_definition("nightly", schedule.definition)
    assert again == schedule and again.digest == schedule.digest
    changed = parse("nightly", {**schedule.definition, "cron": "31 3 * * 1-5"})
    assert changed.digest != schedule.digest
    assert schedule.when == "30 3 * * 1-5 (Europe/Paris)" and every(90).when == "every 90s"
    moved = parse("m", {"move": "orders", "to": "pending", "filter": {"state": "stuck"},
                        "every": 300})
    assert from_definition("m", moved.definition) == moved
    inserted = parse("i", {"insert": "reports", "values": {"kind": "daily"},
                           "cron": "0 0 * * *"})
    assert inserted.kind == "insert" and inserted.values == {"kind": "daily"}


@pytest.mark.parametrize(("raw", "says"), [
    ({"cron": "0 3 * * *"}, "exactly one of"),
    ({"task": "a.b", "insert": "t", "every": 5}, "exactly one of"),
    ({"task": "a.b"}, "give 'cron'"),
    ({"task": "a.b", "cron": "0 3 * * *", "every": 5}, "not both"),
    ({"task": "a.b", "cron": "61 3 * * *"}, "bad cron"),
    ({"task": "a.b", "cron": "0 0 3 * * *"}, "five fields"),
    ({"task": "a.b", "cron": "0 3 * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
    ({"task": "a.b", "every": 0.5}, ">= 1"),
    ({"task": "a.b", "every": True}, ">= 1"),
    ({"task": "a.b", "every": 5, "timezone": "UTC"}, "'cron' only"),
    ({"task": "a.b", "every": 5, "missed": "never"}, "'missed'"),
    ({"task": "a.b", "every": 5, "max_catch_up": 3}, "missed='all' only"),
    ({"task": "a.b", "every": 5, "missed": "all", "max_catch_up": 0}, "max_catch_up"),
    ({"task": "a.b", "every": 5, "sometimes": 1}, "unknown key"),
    ({"task": "a.b", "every": 5, "args": "x"}, "'args' is a list"),
    ({"task": "a.b", "every": 5, "kwargs": {"x": float("nan")}}, "plain JSON"),
    ({"move": "t", "every": 5}, "'to'"),
    ({"insert": "t", "every": 5, "values": [1]}, "'values'"),
])
def test_bad_definitions_say_what_is_wrong(raw: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError, match="schedule 'x'") as caught:
        parse("x", raw)
    assert says in str(caught.value)


@pytest.mark.parametrize("schedule", [cron("0 3 * * *"), every(3600)], ids=["cron", "every"])
def test_a_row_claimed_before_its_tick_fires_nothing(schedule: Schedule) -> None:
    """A row can be claimed early (handed back, run by an operator's "run now" elsewhere, a
    clock a little ahead): its tick still waits for its time."""
    tick = datetime(2026, 1, 2, 3, tzinfo=UTC)
    for early in (timedelta(seconds=1), timedelta(minutes=59)):
        assert plan(schedule, tick, tick - early) == Plan((), 0, tick)
    assert plan(schedule, tick, tick).fire == (tick,)
