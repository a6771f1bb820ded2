"""The graph every schedule row follows, and what its handler does at a tick.

Apart from the storage (``_schedules``) so that declaring a schedule model, as Django's app
loading does, needs no database toolkit: both integrations' models name this graph and call
``fire`` with their own ``Actions``.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from ._clock import handler_now
from ._graph import State, StateGraph
from .errors import TryAgainLater

if TYPE_CHECKING:
    # Schedules' definitions and ticks (cronsim, zoneinfo): imported where a schedule is
    # parsed or fired, so a worker of a project without schedules never loads them.
    from ._schedule import Plan, Schedule

TABLE = "stator_schedules"
LEASE_TIMEOUT = 10.0  # seconds a firing may take (its lease is longer, see the graph)


class ScheduleStates(StateGraph):
    """``active`` rows fire at their ticks; ``paused`` ones wait for an operator's resume;
    ``disabled`` ones were removed from the code (declared again, they are active again)."""

    active = State(timeout=LEASE_TIMEOUT, retry_after=10, max_retry_after=600,
                   force_initial=True)
    paused = State(externally_progressed=True)
    disabled = State(externally_progressed=True)

    active.transitions_to(paused)
    active.transitions_to(disabled)
    paused.transitions_to(active)
    paused.transitions_to(disabled)
    disabled.transitions_to(active)

    @classmethod
    def check_active(cls, row: Any) -> None:
        row.stator_fire()


class Actions(Protocol):
    """What a schedule does at a tick, in the handler's transaction (one per integration)."""

    def run(self, schedule: Schedule, tick: datetime) -> str: ...

    def record(self, row: Any, values: dict[str, Any]) -> None: ...


def fire(row: Any, actions: Actions, now: datetime | None = None) -> Plan:
    """Fire what is due for ``row`` and record it on the row; raises ``TryAgainLater`` until
    its next tick (the engine's write of that due time is the fence of all of it)."""
    from ._schedule import from_definition, plan

    now = now or handler_now()
    schedule = from_definition(row.name, json.loads(row.definition))
    result = plan(schedule, row.next_tick, now)
    outcomes = [actions.run(schedule, tick) for tick in result.fire]
    values: dict[str, Any] = {}
    if result.next != row.next_tick:
        values["next_tick"] = result.next
    if result.fire:
        values.update(last_tick=result.fire[-1], last_fired_at=now, fired=row.fired + len(
            result.fire), last_outcome=outcomes[-1] if len(outcomes) == 1 else
            f"{len(outcomes)} ticks: {outcomes[-1]}")
    if result.missed:
        values["missed"] = row.missed + result.missed
    if values:
        actions.record(row, values)
    raise TryAgainLater(max((result.next - now).total_seconds(), 0.0))
