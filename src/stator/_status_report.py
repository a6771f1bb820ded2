"""What ``Stator.status`` reports: per model and state the rows, due, oldest due and failing
rows, recent stats, limits, errors, workers and schedules.

A module of its own, imported when a report is asked for: a worker never reports, and
starts without this and the queries it runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine

from ._graph import role
from ._schedule_ops import schedule_report
from ._store import StateCount
from ._store._counts import every_state
from ._store._limit_usage import StateLimit, limit_usage
from ._store.interface import Driver

RECENT = timedelta(minutes=5)
LIVE_AFTER = timedelta(seconds=30)


def status_report(store: Driver, engine: Engine, url: str, now: datetime) -> dict[str, Any]:
    counts = store.state_counts(now)
    stats = {s.model: s.as_row() for s in store.recent_stats(now - RECENT)}
    usage = limit_usage(store, now)
    models: list[dict[str, Any]] = []
    for tracked in store.tracked:
        graph = tracked.graph
        states = [{**_state_row(c, now), "role": role(graph.states.get(c.state))}
                  for c in every_state(tracked, counts)]  # the empty states too, at zero
        models.append({  # named as people name it (its label), its table besides
            "model": tracked.label, "table": tracked.name, "graph": graph.__name__,
            "states": states, "recent": stats.get(tracked.name, {}),
            "limits": [_limit_row(u) for u in usage if u.model == tracked.name],
        })
    names = [t.name for t in store.tracked]  # this app's, not the database's
    label = {t.name: t.label for t in store.tracked}
    workers = [
        {**w.as_row(), "alive": now - w.last_seen <= LIVE_AFTER}
        for w in store.workers(names)
    ]
    return {
        "database": url, "now": now.isoformat(), "models": models,
        "workers": [_jsonable(w) for w in workers],
        "errors": [{**_jsonable(e.as_row()), "model": label[e.model], "table": e.model}
                   for e in store.recent_errors(models=names)],
        "schedules": schedule_report(engine, now),
    }


def _state_row(c: StateCount, now: datetime) -> dict[str, Any]:
    oldest = c.oldest_due
    return {
        "state": c.state, "rows": c.rows, "due": c.due, "failing": c.failing,
        "oldest_due_seconds": round((now - oldest).total_seconds(), 3) if oldest else None,
        "known": c.known, "estimated": c.estimated,
    }


def _limit_row(u: StateLimit) -> dict[str, Any]:
    """A limited state in the status report: running rows, and the limit they count against
    (of the whole state, or of each of its busiest keys)."""
    usages = [u.whole] if u.whole is not None else list(u.keys)
    return {
        "state": u.state, "key_column": u.key_column, "running": u.running,
        "saturation": round(u.saturation, 3),
        "keys": [{"key": k.key, "running": k.running, "limit": k.limit} for k in usages],
    }


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}
