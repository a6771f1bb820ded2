"""Schedules seen and steered: what ``stator status``, ``/metrics``, the dashboard and the
admin read about each schedule, and the operator's "run now", "pause" and "resume".

Each action is one conditional UPDATE of the schedule's row, fenced by what was read (its
state and ``state_next``), and recorded in ``stator_actions`` in the same transaction.  The
change of ``state_next`` is itself the fence against a worker firing the row meanwhile: its
write is refused and its firing rolled back, so "run now" never fires a tick twice.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, column, inspect, select, table

from ._schedule import from_definition, next_tick
from ._store._operations import WRITE
from ._store._schema import actions_table, schedules_table
from .errors import ConfigError

ACTIONS = ("run_now", "pause", "resume")
_TASK_PREFIX = "enqueued task "


def schedule_report(engine: Engine, now: datetime) -> list[dict[str, Any]]:
    """Every schedule row, JSON-ready: its timing, state, last and next tick, what it last
    did (for a task, the task's state), how many ticks it fired and missed, and its lag
    (how late its due tick is, 0 when none is due)."""
    with engine.connect() as conn:
        if not inspect(conn).has_table(schedules_table.name):
            return []
        rows = conn.execute(select(schedules_table).order_by(schedules_table.c.name)).all()
        results = _task_states(conn, [r.last_outcome for r in rows])
    report = []
    for row in rows:
        try:
            when = from_definition(row.name, json.loads(row.definition)).when
        except (ConfigError, ValueError):
            when = "(unreadable definition)"
        due = row.next_tick
        lag = (now - due).total_seconds() if row.state == "active" and due and due < now else 0
        report.append({
            "name": row.name, "kind": row.kind, "when": when, "state": row.state,
            "last_tick": _text(row.last_tick), "next_tick": _text(due),
            "last_fired_at": _text(row.last_fired_at), "last_outcome": row.last_outcome,
            "last_result": results.get(row.last_outcome or ""), "fired": row.fired,
            "missed": row.missed, "lag_seconds": round(lag, 3), "digest": row.digest,
        })
    return report


def _task_states(conn: Any, outcomes: list[str | None]) -> dict[str, str]:
    """The state of each task a schedule last enqueued (Django's task table, when present)."""
    ids = {o.rsplit(" ", 1)[-1]: o for o in outcomes if o and _TASK_PREFIX in o}
    if not ids or not inspect(conn).has_table("stator_tasks"):
        return {}
    tasks = table("stator_tasks", column("id"), column("state"))
    found = conn.execute(select(tasks.c.id, tasks.c.state).where(tasks.c.id.in_(list(ids))))
    return {ids[task_id]: state for task_id, state in found}


def _text(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def schedule_action(engine: Engine, name: str, action: str, now: datetime, actor: str) -> int:
    """Run one operator action on schedule ``name``; returns 1 if it applied, 0 if the row
    was not in a state it applies to (or changed meanwhile).  Recorded in ``stator_actions``.

    ``run_now``: an active schedule fires at once (its next tick is brought forward to now;
    the tick after it is unchanged).  ``pause``: an active schedule stops firing.
    ``resume``: a paused one runs again from its next tick after now (what it missed while
    paused is not caught up)."""
    if action not in ACTIONS:
        raise ConfigError(f"unknown schedule action {action!r} (one of {', '.join(ACTIONS)})")
    t = schedules_table
    with engine.connect().execution_options(**WRITE) as conn, conn.begin():
        row = conn.execute(select(t).where(t.c.name == name)).one_or_none()
        if row is None:
            raise ConfigError(f"no schedule named {name!r}")
        values = _action_values(row, action, now)
        affected = 0
        if values is not None:
            fence = t.c.state_next.is_(None) if row.state_next is None else (
                t.c.state_next == row.state_next)
            affected = conn.execute(t.update().where(
                t.c.name == name, t.c.state == row.state, fence).values(**values)).rowcount
        conn.execute(actions_table.insert().values(
            created_at=now, actor=actor, action=f"schedule_{action}", model=t.name,
            row_pk=name, detail=f"{action.replace('_', ' ')} ({row.state})",
            affected=affected))
    return affected


def _action_values(row: Any, action: str, now: datetime) -> dict[str, Any] | None:
    if action == "run_now" and row.state == "active":
        tick = row.next_tick if row.next_tick is not None and row.next_tick < now else now
        return {"next_tick": tick, "state_next": now}
    if action == "pause" and row.state == "active":
        return {"state": "paused", "state_changed": now, "state_next": None}
    if action == "resume" and row.state == "paused":
        tick = next_tick(from_definition(row.name, json.loads(row.definition)), now)
        return {"state": "active", "state_changed": now, "state_next": tick,
                "next_tick": tick, "state_attempts": 0}
    return None
