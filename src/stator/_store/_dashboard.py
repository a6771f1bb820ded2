"""What the dashboard, ``/metrics`` and ``stator status`` read, in one import: the counts
(``_counts``), how full the concurrency limits are (``_limit_usage``), rows page by page
(``_row_pages``), the checks on values from outside (``_outside_values``), and here the error
groups, pauses and the action log.  The actions are ``_operator_actions``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from .._failure_log import exception_of
from . import _schema
from ._counts import (
    DUE_CAP,
    EDGE_WINDOW,
    EXACT_BELOW,
    FAILING_WINDOW,
    OTHER_STATES,
    UNKNOWN_CAP,
    edge_rates,
    every_state,
    live_workers,
    state_counts,
    throughput,
)
from ._limit_usage import LimitUsage, StateLimit, limit_usage
from ._outside_values import parse_pk, parse_time, storable_text
from ._row_pages import CURSOR_NEXT, PAGE_SIZE, RowPage, get_row, list_rows, row_errors

if TYPE_CHECKING:
    from .interface import Driver as Store


# -- errors --------------------------------------------------------------------------------


def error_groups(
    store: Store, models: Sequence[str], limit: int = 2000
) -> list[dict[str, Any]]:
    """The newest ``limit`` errors of ``models``, grouped by model, state and exception
    type; the largest groups first, each with its newest error."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for e in store.recent_errors(limit=limit, models=models):
        key = (e.model, e.state, exception_of(e.kind, e.message))
        group = groups.get(key)
        if group is None:
            groups[key] = {"model": key[0], "state": key[1], "exception": key[2], "count": 1,
                           "rows": {e.row_pk}, "last": e}
        else:
            group["count"] += 1
            group["rows"].add(e.row_pk)
    out = sorted(groups.values(), key=lambda g: (-g["count"], g["model"], g["state"]))
    for g in out:
        g["rows"] = len(g["rows"])
    return out


# -- pausing -------------------------------------------------------------------------------


def paused_info(store: Store) -> dict[str, dict[str, Any]]:
    p = _schema.paused_table
    with store.engine.connect() as conn:
        return {r.model: dict(r._mapping) for r in conn.execute(select(p))}


def recent_actions(store: Store, limit: int = 20) -> list[dict[str, Any]]:
    a = _schema.actions_table
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in
                conn.execute(select(a).order_by(a.c.id.desc()).limit(limit))]


__all__ = [
    "CURSOR_NEXT",
    "DUE_CAP",
    "EDGE_WINDOW",
    "EXACT_BELOW",
    "FAILING_WINDOW",
    "OTHER_STATES",
    "PAGE_SIZE",
    "UNKNOWN_CAP",
    "LimitUsage",
    "RowPage",
    "StateLimit",
    "edge_rates",
    "error_groups",
    "every_state",
    "exception_of",
    "get_row",
    "limit_usage",
    "list_rows",
    "live_workers",
    "parse_pk",
    "parse_time",
    "paused_info",
    "recent_actions",
    "row_errors",
    "state_counts",
    "storable_text",
    "throughput",
]
