"""How many rows each state holds, and the overview's other figures (workers, throughput,
rates along edges): what the dashboard, ``/metrics`` and ``stator status`` count.

Counting stays cheap on big tables.  Below ``EXACT_BELOW`` rows (the planner's own estimate,
where the database keeps one; always on SQLite) the counts are exact, one ``GROUP BY`` per
model.  Above it, nothing scans the table: rows per state come from the planner's statistics
(``pg_stats``), due rows are counted through the partial claim index up to ``DUE_CAP``, the
oldest due time is one index probe, and "failing" becomes the rows that failed within
``FAILING_WINDOW`` (from the error log).  Such figures carry ``estimated: True`` and the
pages mark them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, func, select, text

from . import _schema
from ._read_records import StateCount
from ._tracked import TrackedModel
from ._unreadable import readable_time

if TYPE_CHECKING:
    from .interface import Driver as Store

EXACT_BELOW = 200_000
DUE_CAP = 10_000
FAILING_WINDOW = timedelta(hours=1)
EDGE_WINDOW = timedelta(minutes=5)
# States not in the graph (written by raw SQL, a migration, another tool) are counted too, so
# the series sum to the row count; but only the UNKNOWN_CAP with the most rows by name: the
# rest, however many, are one OTHER_STATES entry (on big tables it also holds the rows the
# statistics give no state for), so the pages and /metrics stay bounded.
UNKNOWN_CAP = 50
OTHER_STATES = "(other)"


def state_counts(
    store: Store, now: datetime, exact_below: int = EXACT_BELOW
) -> list[StateCount]:
    """Per model and state: rows, due now, oldest due time, failing rows; ``estimated``
    says whether the figures are estimates (see the module's docstring)."""
    out: list[StateCount] = []
    with store.engine.connect() as conn:
        for t in store.tracked:
            size = _estimated_size(store, conn, t)
            counted: Iterable[dict[str, Any]]
            if size is not None and size >= exact_below:
                counted = _estimated_counts(store, conn, t, now, size)
            else:
                counted = _exact_counts(store, conn, t, now)
            out.extend(StateCount(**c) for c in _capped(counted, t))
        conn.rollback()
    return out


def every_state(t: TrackedModel, counts: Iterable[StateCount]) -> list[StateCount]:
    """``t``'s counts with every state of its graph, in the graph's order, a state without
    rows at zero (so a listing shows it and an alert rule on its series finds one), then the
    states the graph lacks.  A zero among estimates is an estimate too."""
    mine = {c.state: c for c in counts if c.model == t.name}
    estimated = any(c.estimated for c in mine.values())
    known = [mine.get(name) or StateCount(t.name, name, 0, 0, None, 0, True, estimated)
             for name in t.graph.states]
    return [*known, *(c for name, c in mine.items() if name not in t.graph.states)]


def _capped(counted: Iterable[dict[str, Any]], t: TrackedModel) -> list[dict[str, Any]]:
    """The graph's states as counted, then the ``UNKNOWN_CAP`` unknown states with the most
    rows, then one ``OTHER_STATES`` entry for the rest; never more than that in memory."""
    known: list[dict[str, Any]] = []
    unknown: list[dict[str, Any]] = []
    other: dict[str, Any] | None = None

    def most_rows_first() -> None:
        nonlocal other
        unknown.sort(key=lambda c: (-c["rows"], c["state"]))
        for c in unknown[UNKNOWN_CAP:]:
            other = _fold(other, c)
        del unknown[UNKNOWN_CAP:]

    for c in counted:
        if c["state"] in t.graph.states:
            known.append(c)
        elif c["state"] == OTHER_STATES:  # never two entries of that name
            other = _fold(other, c)
        else:
            unknown.append(c)
            if len(unknown) >= 20 * UNKNOWN_CAP:
                most_rows_first()
    most_rows_first()
    return [*known, *sorted(unknown, key=lambda c: c["state"]), *([other] if other else [])]


def _fold(into: dict[str, Any] | None, c: dict[str, Any]) -> dict[str, Any]:
    if into is None:
        return {**c, "state": OTHER_STATES, "known": False}
    firsts = [when for when in (into["oldest_due"], c["oldest_due"]) if when is not None]
    return {
        **into, "rows": into["rows"] + c["rows"], "due": into["due"] + c["due"],
        "oldest_due": min(firsts) if firsts else None,
        "failing": into["failing"] + c["failing"],
        "estimated": into["estimated"] or c["estimated"],
    }


def _exact_counts(
    store: Store, conn: Connection, t: TrackedModel, now: datetime
) -> Iterator[dict[str, Any]]:
    rows = conn.execute(text(
        f"SELECT state, count(*), "
        f"sum(CASE WHEN state_next <= :now THEN 1 ELSE 0 END), "
        f"{store.dialect.readable_time('min(CASE WHEN state_next <= :now THEN state_next END)')}, "
        f"sum(CASE WHEN state_attempts > 0 THEN 1 ELSE 0 END) "
        f"FROM {t.quoted_table} GROUP BY state ORDER BY state"
    ), {"now": store.dialect.ts(now)})
    return (
        {
            "model": t.name, "state": state, "rows": int(count), "due": int(due or 0),
            "oldest_due": readable_time(store, oldest, conn.dialect, now),
            "failing": int(failing or 0), "known": state in t.graph.states,
            "estimated": False,
        }
        for state, count, due, oldest, failing in rows
    )


def _estimated_size(store: Store, conn: Connection, t: TrackedModel) -> int | None:
    """The planner's estimate of the table's rows (None where there is none, or the
    table was never analysed)."""
    sql = store.dialect.row_estimate_sql
    if sql is None:
        return None
    value = conn.execute(text(sql), {"name": t.quoted_table}).scalar()
    return None if value is None or value < 0 else int(value)


def _estimated_counts(
    store: Store, conn: Connection, t: TrackedModel, now: datetime, size: int
) -> list[dict[str, Any]]:
    schema = t.table.schema
    sql = store.dialect.state_frequencies_sql
    assert sql is not None  # only asked where the database estimates sizes
    stats = conn.execute(text(sql), {"table": t.table.name, "schema": schema}).first()
    share: dict[str, float] = {}
    if stats is not None and stats[0] is not None:
        share = dict(zip(stats[0], stats[1], strict=True))
    scheduled = {s.name for s in t.graph.scheduled_states()}
    failing = _recently_failing(conn, t.name, now)
    out: list[dict[str, Any]] = []
    for state in sorted(set(share) | set(t.graph.states)):
        rows = round(share.get(state, 0.0) * size)
        due, oldest = 0, None
        if state in scheduled:
            due = int(conn.execute(text(
                f"SELECT count(*) FROM (SELECT 1 FROM {t.quoted_table} WHERE state = :s "
                f"AND state_next IS NOT NULL AND state_next <= :now LIMIT {DUE_CAP}) AS d"
            ), {"s": state, "now": store.dialect.ts(now)}).scalar_one())
            oldest = readable_time(store, conn.execute(text(
                f"SELECT {store.dialect.readable_time('min(state_next)')} "
                f"FROM {t.quoted_table} WHERE state = :s "
                f"AND state_next IS NOT NULL AND state_next <= :now"
            ), {"s": state, "now": store.dialect.ts(now)}).scalar(), conn.dialect, now)
            if state not in share:  # too rare for the statistics: count it, capped
                rows = int(conn.execute(text(
                    f"SELECT count(*) FROM (SELECT 1 FROM {t.quoted_table} WHERE state = :s "
                    f"AND state_next IS NOT NULL LIMIT {DUE_CAP}) AS d"
                ), {"s": state}).scalar_one())
        if not rows and not due and state not in share and state not in scheduled:
            continue
        out.append({
            "model": t.name, "state": state, "rows": max(rows, due), "due": due,
            "oldest_due": oldest, "failing": failing.get(state, 0),
            "known": state in t.graph.states, "estimated": True,
        })
    rest = size - sum(c["rows"] for c in out)
    if rest > 0:  # rows in states too rare for the statistics, known to the graph or not
        out.append({
            "model": t.name, "state": OTHER_STATES, "rows": rest, "due": 0, "oldest_due": None,
            "failing": 0, "known": False, "estimated": True,
        })
    return out


def _recently_failing(conn: Connection, model: str, now: datetime) -> dict[str, int]:
    e = _schema.errors_table
    query = (
        select(e.c.state, func.count(func.distinct(e.c.row_pk)))
        .where(e.c.model == model, e.c.created_at >= now - FAILING_WINDOW)
        .group_by(e.c.state)
    )
    return {state: int(n) for state, n in conn.execute(query)}


def live_workers(store: Store, now: datetime, live_after: timedelta) -> list[dict[str, Any]]:
    """This app's workers seen within ``live_after``, with their rows in flight."""
    names = [t.name for t in store.tracked]
    out = []
    for w in store.workers(names):
        if now - w.last_seen > live_after:
            continue
        busy = sum(1 for v in w.threads.values() if str(v) == "running")
        out.append({**w.as_row(), "in_flight": busy})
    return out


def throughput(
    store: Store, now: datetime, minutes: int = 10
) -> dict[str, list[int]]:
    """Transitions per model in each of the last ``minutes`` minutes (oldest first), from
    the workers' stats periods (attributed to the minute each period ended in)."""
    s = _schema.stats_table
    since = now - timedelta(minutes=minutes)
    out: dict[str, list[int]] = {t.name: [0] * minutes for t in store.tracked}
    query = select(s.c.model, s.c.period_end, s.c.transitions).where(
        s.c.period_end >= since, s.c.model.in_(list(out))
    )
    with store.engine.connect() as conn:
        for model, end, moved in conn.execute(query):
            slot = min(int((end - since).total_seconds() // 60), minutes - 1)
            out[model][max(slot, 0)] += int(moved or 0)
    return out


def edge_rates(
    store: Store, t: TrackedModel, now: datetime, window: timedelta = EDGE_WINDOW
) -> dict[tuple[str, str], float]:
    """Transitions per minute along each edge over ``window``, from the workers' stats."""
    es = _schema.edge_stats_table
    query = (
        select(es.c.source, es.c.target, func.sum(es.c.count))
        .where(es.c.model == t.name, es.c.period_end >= now - window)
        .group_by(es.c.source, es.c.target)
    )
    minutes = window.total_seconds() / 60
    with store.engine.connect() as conn:
        return {(a, b): int(n or 0) / minutes for a, b, n in conn.execute(query)}
