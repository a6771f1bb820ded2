"""Periodic schedules, the pure part: a definition checked, its ticks, and what to fire now.

A schedule is declared in code (Django's ``STATOR["SCHEDULE"]``, ``Stator(schedules=...)``)
as a name and a mapping; ``parse`` checks it once, at start-up, and gives a ``Schedule``
whose ``definition`` (plain JSON) and ``digest`` are what the schedule's row records.  A
worker fires the definition its row records, never its own copy (``from_definition``): two
versions of the code running side by side during a deploy share one row, one tick, one fire.

Cron expressions are evaluated by cronsim (see the "Periodic schedules" page for why), in
the schedule's time zone, with Debian cron's rules for the nights the clock changes: a job
at a fixed time that does not exist that night (02:30 when 02:00 jumps to 03:00) runs once,
when the clock jumps; one at a time that happens twice (the night 03:00 goes back to 02:00)
runs once, the first time; a job whose minute or hour field is ``*`` or a step follows real
time (it runs in both copies of the repeated hour, in none of the skipped one).  ``every``
schedules count seconds from the Unix epoch in UTC, so every worker agrees on their ticks and
``"every": 3600`` fires on the hour.

This module is pure: no database, no clock (times are passed in, UTC, aware).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .errors import ConfigError

MISSED_POLICIES = ("skip", "once", "all")
DEFAULT_MISSED = "once"
DEFAULT_MAX_CATCH_UP = 100  # "all": at most this many missed ticks fired at once
MAX_CATCH_UP_LIMIT = 10_000
# "skip": the newest due tick still fires if it is at most this late (a worker busy for a
# few seconds is not downtime); older ticks are dropped.
ON_TIME = timedelta(seconds=60)
COUNT_LIMIT = 10_000  # missed ticks are counted up to this many per firing, then capped
KINDS = ("task", "insert", "move")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_COMMON = {"cron", "every", "timezone", "missed", "max_catch_up"}
_KEYS = {
    "task": _COMMON | {"task", "args", "kwargs", "queue", "priority", "backend"},
    "insert": _COMMON | {"insert", "values"},
    "move": _COMMON | {"move", "to", "filter"},
}


@dataclass(frozen=True)
class Schedule:
    """One checked schedule.  ``target``: the task's import path, or the model's name."""

    name: str
    kind: str
    target: str
    cron: str | None = None
    every: float | None = None
    timezone: str = "UTC"
    missed: str = DEFAULT_MISSED
    max_catch_up: int = DEFAULT_MAX_CATCH_UP
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str = "default"
    priority: int = 0
    backend: str = "default"
    values: dict[str, Any] = field(default_factory=dict)
    to: str = ""
    filter: dict[str, Any] = field(default_factory=dict)

    @property
    def definition(self) -> dict[str, Any]:
        """What the row records: everything but the name, as plain JSON."""
        when: dict[str, Any] = {"cron": self.cron} if self.cron else {"every": self.every}
        common = {**when, "missed": self.missed}
        if self.cron:
            common["timezone"] = self.timezone
        if self.missed == "all":
            common["max_catch_up"] = self.max_catch_up
        if self.kind == "task":
            return {"task": self.target, "args": self.args, "kwargs": self.kwargs,
                    "queue": self.queue, "priority": self.priority, "backend": self.backend,
                    **common}
        if self.kind == "insert":
            return {"insert": self.target, "values": self.values, **common}
        return {"move": self.target, "to": self.to, "filter": self.filter, **common}

    @property
    def definition_text(self) -> str:
        return json.dumps(self.definition, sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        """Names the definition: rows and workers compare digests, not definitions."""
        return hashlib.sha256(self.definition_text.encode()).hexdigest()[:32]

    @property
    def when(self) -> str:
        """The timing as people read it: ``30 3 * * 1-5 (Europe/Paris)`` or ``every 90s``."""
        if self.cron:
            return f"{self.cron} ({self.timezone})"
        return f"every {self.every:g}s"


@dataclass(frozen=True)
class Plan:
    """What one firing does: the ticks to fire now (oldest first), how many due ticks the
    policy drops, and the tick after ``now``."""

    fire: tuple[datetime, ...]
    missed: int
    next: datetime


def parse(name: str, raw: Mapping[str, Any], model_name: Any = None) -> Schedule:
    """Check one declared schedule; ``ConfigError`` names the schedule and what is wrong.

    ``model_name`` turns what ``insert``/``move`` name (a model class, a label) into the
    name the row records; by default the value must already be that text."""
    where = f"schedule {name!r}"
    if not isinstance(name, str) or not 0 < len(name) <= 200:
        raise ConfigError(f"{where}: a schedule's name is text of 1 to 200 characters")
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: give a dict, e.g. {{'task': 'app.tasks.f', 'cron': "
                          "'0 3 * * *'}")
    kinds = [k for k in KINDS if k in raw]
    if len(kinds) != 1:
        raise ConfigError(f"{where}: say what it does with exactly one of 'task', 'insert' "
                          "or 'move'")
    kind = kinds[0]
    unknown = sorted(set(raw) - _KEYS[kind])
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} for a "
                          f"{kind!r} schedule")
    target = raw[kind]
    if kind != "task" and model_name is not None:
        target = model_name(target)
    if not isinstance(target, str) or not target:
        raise ConfigError(f"{where}: {kind!r} must name a {'task' if kind == 'task' else 'model'}")
    values: dict[str, Any] = {"name": name, "kind": kind, "target": target}
    values.update(_timing(where, raw))
    values.update(_action(where, kind, raw))
    schedule = Schedule(**values)
    _check_json(where, schedule.definition_text)
    return schedule


def from_definition(name: str, definition: Mapping[str, Any]) -> Schedule:
    """The schedule a row records (its ``definition``), checked as a declaration is."""
    return parse(name, definition)


def _timing(where: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    cron, every = raw.get("cron"), raw.get("every")
    if (cron is None) == (every is None):
        raise ConfigError(f"{where}: give 'cron' (e.g. '30 3 * * 1-5') or 'every' (seconds), "
                          "not both")
    values: dict[str, Any] = {}
    if cron is not None:
        values["cron"] = _check_cron(where, cron)
        values["timezone"] = _check_zone(where, raw.get("timezone", "UTC"))
    else:
        if "timezone" in raw:
            raise ConfigError(f"{where}: 'timezone' applies to 'cron' only ('every' counts "
                              "seconds, which no time zone changes)")
        if (isinstance(every, bool) or not isinstance(every, int | float)
                or not 1 <= every < math.inf):
            raise ConfigError(f"{where}: 'every' is a number of seconds >= 1, not {every!r}")
        values["every"] = int(every) if float(every).is_integer() else float(every)
    missed = raw.get("missed", DEFAULT_MISSED)
    if missed not in MISSED_POLICIES:
        raise ConfigError(f"{where}: 'missed' is one of {', '.join(MISSED_POLICIES)}, not "
                          f"{missed!r}")
    values["missed"] = missed
    limit = raw.get("max_catch_up", DEFAULT_MAX_CATCH_UP)
    if (isinstance(limit, bool) or not isinstance(limit, int)
            or not 1 <= limit <= MAX_CATCH_UP_LIMIT):
        raise ConfigError(f"{where}: 'max_catch_up' is a whole number from 1 to "
                          f"{MAX_CATCH_UP_LIMIT}, not {limit!r}")
    if "max_catch_up" in raw and missed != "all":
        raise ConfigError(f"{where}: 'max_catch_up' applies to missed='all' only")
    values["max_catch_up"] = limit
    return values


def _check_cron(where: str, cron: Any) -> str:
    if not isinstance(cron, str) or len(cron.split()) != 5:
        raise ConfigError(f"{where}: 'cron' is five fields (minute hour day month weekday), "
                          f"not {cron!r}")
    try:
        CronSim(cron, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise ConfigError(f"{where}: bad cron expression {cron!r}: {exc}") from None
    return " ".join(cron.split())


def _check_zone(where: str, zone: Any) -> str:
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ConfigError(f"{where}: unknown time zone {zone!r} (an IANA name, e.g. "
                          "'Europe/Paris')") from None
    return str(zone)


def _action(where: str, kind: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    if kind == "task":
        args, kwargs = raw.get("args", []), raw.get("kwargs", {})
        priority = raw.get("priority", 0)
        if not isinstance(args, list | tuple) or not isinstance(kwargs, Mapping):
            raise ConfigError(f"{where}: 'args' is a list and 'kwargs' a dict")
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ConfigError(f"{where}: 'priority' is a whole number, not {priority!r}")
        queue, backend = raw.get("queue", "default"), raw.get("backend", "default")
        if not isinstance(queue, str) or not isinstance(backend, str):
            raise ConfigError(f"{where}: 'queue' and 'backend' are names (text)")
        return {"args": list(args), "kwargs": dict(kwargs), "priority": priority,
                "queue": queue, "backend": backend}
    if kind == "insert":
        values = raw.get("values", {})
        if not isinstance(values, Mapping):
            raise ConfigError(f"{where}: 'values' is a dict of the new row's fields")
        return {"values": dict(values)}
    to, found = raw.get("to"), raw.get("filter", {})
    if not isinstance(to, str) or not to:
        raise ConfigError(f"{where}: 'to' names the state the rows move to")
    if not isinstance(found, Mapping):
        raise ConfigError(f"{where}: 'filter' is a dict (the rows to move)")
    return {"to": to, "filter": dict(found)}


def _check_json(where: str, text: str) -> None:
    if "\\u0000" in text or "NaN" in text or "Infinity" in text:
        raise ConfigError(f"{where}: its values must be plain JSON (no NUL, NaN or infinity)")


# -- ticks --------------------------------------------------------------------------------


def next_tick(schedule: Schedule, after: datetime) -> datetime:
    """The schedule's first tick strictly after ``after`` (UTC)."""
    if schedule.every is not None:
        step = _micros(schedule.every)
        return _at((_micros_of(after) // step + 1) * step)
    return next(_cron_ticks(schedule, after))


def _cron_ticks(schedule: Schedule, after: datetime) -> Iterator[datetime]:
    """Cron ticks after ``after``, in UTC.  Started two hours earlier (the earlier ticks
    dropped) so that a start inside a repeated hour sees that hour's ticks as one continuous
    run of the expression does: cronsim's iteration, not its starting point, knows the fold."""
    assert schedule.cron is not None
    zone = ZoneInfo(schedule.timezone)
    start = (after - timedelta(hours=2)).astimezone(zone)
    for tick in CronSim(schedule.cron, start):
        utc = tick.astimezone(UTC)
        if utc > after:
            yield utc


def plan(schedule: Schedule, due: datetime | None, now: datetime) -> Plan:
    """What to fire at ``now`` for a row whose next tick is ``due`` (None: start afresh,
    firing nothing: a new, resumed or changed schedule runs from its next tick on).

    The ticks due (``due`` up to ``now``) are fired by the schedule's ``missed`` policy:
    ``skip`` fires the newest one only if it is on time (``ON_TIME``), ``once`` fires the
    newest one, ``all`` fires them all, the newest ``max_catch_up`` of them if there are more.
    The others are counted as missed (up to ``COUNT_LIMIT``)."""
    if due is None:
        return Plan((), 0, next_tick(schedule, now))
    if due > now:
        return Plan((), 0, due)
    want = schedule.max_catch_up if schedule.missed == "all" else 1
    newest, total = _due_ticks(schedule, due, now, want)
    if schedule.missed == "skip" and now - newest[-1] > ON_TIME:
        fire: tuple[datetime, ...] = ()
    else:
        fire = tuple(newest[-want:])
    return Plan(fire, max(total - len(fire), 0), next_tick(schedule, now))


def _due_ticks(
    schedule: Schedule, first: datetime, now: datetime, want: int
) -> tuple[list[datetime], int]:
    """The newest ``want`` ticks from ``first`` (itself a tick) to ``now``, oldest first, and
    how many there are in all (capped at ``COUNT_LIMIT``)."""
    if schedule.every is not None:
        step = _micros(schedule.every)
        start, end = _micros_of(first), _micros_of(now)
        total = (end - start) // step + 1
        newest = [_at(start + i * step) for i in range(max(total - want, 0), total)]
        return newest, min(total, COUNT_LIMIT)
    ticks = [first]
    for tick in _cron_ticks(schedule, first):
        if tick > now or len(ticks) >= COUNT_LIMIT:
            break
        ticks.append(tick)
    if ticks[-1] < now and len(ticks) >= COUNT_LIMIT:
        # A long downtime: the newest ticks are found walking back from ``now`` in windows.
        return _newest_cron(schedule, first, now, want), COUNT_LIMIT
    return ticks[-want:], len(ticks)


def _newest_cron(schedule: Schedule, first: datetime, now: datetime, want: int) -> list[datetime]:
    window = timedelta(hours=1)
    while True:
        start = max(first, now - window)
        found = ([first] if start == first else []) + list(_until(schedule, start, now))
        if len(found) >= want or start == first:
            return found[-want:]
        window *= 2


def _until(schedule: Schedule, start: datetime, end: datetime) -> Iterator[datetime]:
    for tick in _cron_ticks(schedule, start):
        if tick > end:
            return
        yield tick


def _micros(seconds: float) -> int:
    return round(seconds * 1_000_000)


def _micros_of(when: datetime) -> int:
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _at(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)
