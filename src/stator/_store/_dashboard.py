"""What the dashboard, ``/metrics`` and ``stator status`` read: the one place that knows how
to count rows and how to page through them (the actions are ``_operator_actions.py``).

Counting stays cheap on big tables.  Below ``EXACT_BELOW`` rows (PostgreSQL's own estimate;
always on SQLite) the counts are exact, one ``GROUP BY`` per model.  Above it, nothing scans
the table: rows per state come from the planner's statistics (``pg_stats``), due rows are
counted through the partial claim index up to ``DUE_CAP``, the oldest due time is one index
probe, and "failing" becomes the rows that failed within ``FAILING_WINDOW`` (from the error
log).  Such figures carry ``estimated: True`` and the pages mark them.

Rows are paged by keyset, never ``OFFSET``: through the claim index on
``(state, state_next)`` (plus the primary key as tie-breaker) for a state the engine
schedules, by primary key otherwise.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    String,
    and_,
    cast,
    func,
    or_,
    select,
    text,
    type_coerce,
)

from . import _schema
from ._tracked import TrackedModel
from ._unreadable import is_unreadable, readable_row, readable_time

if TYPE_CHECKING:
    from .interface import Driver as Store

EXACT_BELOW = 200_000
DUE_CAP = 10_000
FAILING_WINDOW = timedelta(hours=1)
EDGE_WINDOW = timedelta(minutes=5)
PAGE_SIZE = 50
CURSOR_NEXT = "stator_cursor_next"
# States not in the graph (written by raw SQL, a migration, another tool) are counted too, so
# the series sum to the row count; but only the UNKNOWN_CAP with the most rows by name: the
# rest, however many, are one OTHER_STATES entry (on big tables it also holds the rows the
# statistics give no state for), so the pages and /metrics stay bounded.
UNKNOWN_CAP = 50
OTHER_STATES = "(other)"


@dataclass(frozen=True)
class RowPage:
    """One page of rows and the cursor of the next one (None on the last page)."""

    rows: list[dict[str, Any]]
    next_cursor: str | None
    by_index: bool  # paged through the claim index (state_next, pk) rather than by pk


# -- counting -------------------------------------------------------------------------------


def state_counts(
    store: Store, now: datetime, exact_below: int = EXACT_BELOW
) -> list[dict[str, Any]]:
    """Per model and state: rows, due now, oldest due time, failing rows; ``estimated``
    says whether the figures are estimates (see the module's docstring)."""
    out: list[dict[str, Any]] = []
    with store.engine.connect() as conn:
        for t in store.tracked:
            size = _estimated_size(store, conn, t)
            counted: Iterable[dict[str, Any]]
            if size is not None and size >= exact_below:
                counted = _estimated_counts(store, conn, t, now, size)
            else:
                counted = _exact_counts(store, conn, t, now)
            out.extend(_capped(counted, t))
        conn.rollback()
    return out


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
    """PostgreSQL's estimate of the table's rows (None elsewhere, or never analysed)."""
    if store.dialect.name != "postgresql":
        return None
    value = conn.execute(
        text("SELECT reltuples FROM pg_class WHERE oid = to_regclass(:name)"),
        {"name": t.quoted_table},
    ).scalar()
    return None if value is None or value < 0 else int(value)


def _estimated_counts(
    store: Store, conn: Connection, t: TrackedModel, now: datetime, size: int
) -> list[dict[str, Any]]:
    schema = t.table.schema
    stats = conn.execute(text(
        "SELECT most_common_vals::text::text[], most_common_freqs FROM pg_stats "
        "WHERE tablename = :table AND attname = 'state' "
        "AND schemaname = coalesce(:schema, current_schema())"
    ), {"table": t.table.name, "schema": schema}).first()
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
        if now - w["last_seen"] > live_after:
            continue
        try:
            threads = json.loads(w["threads"])
        except ValueError:
            threads = {}
        busy = sum(1 for v in threads.values() if str(v) == "running")
        out.append({**w, "in_flight": busy})
    return out


def throughput(
    store: Store, now: datetime, minutes: int = 10
) -> dict[str, list[int]]:
    """Rows processed per model in each of the last ``minutes`` minutes (oldest first),
    from the workers' stats periods (attributed to the minute each period ended in)."""
    s = _schema.stats_table
    since = now - timedelta(minutes=minutes)
    out: dict[str, list[int]] = {t.name: [0] * minutes for t in store.tracked}
    query = select(s.c.model, s.c.period_end, s.c.processed).where(
        s.c.period_end >= since, s.c.model.in_(list(out))
    )
    with store.engine.connect() as conn:
        for model, end, processed in conn.execute(query):
            slot = min(int((end - since).total_seconds() // 60), minutes - 1)
            out[model][max(slot, 0)] += int(processed)
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


# -- rows ---------------------------------------------------------------------------------


def list_rows(
    store: Store, t: TrackedModel, now: datetime, *, state: str | None = None,
    due: bool = False, failing: bool = False, unknown: bool = False, after: str | None = None,
    limit: int = PAGE_SIZE,
) -> RowPage:
    """A page of ``t``'s rows matching the filters, after the cursor ``after``; ``unknown``:
    only rows in states the graph does not have.

    Raises ``ValueError`` for a cursor this function did not make, and for a ``state`` the
    database could not hold."""
    table = t.table
    pk = table.c[t.pk]
    scheduled = {s.name for s in t.graph.scheduled_states()}
    by_index = state is not None and state in scheduled
    where: list[ColumnElement[bool]] = []
    if state is not None:
        where.append(table.c.state == storable_text(store, state))
    if unknown:
        where.append(table.c.state.not_in(list(t.graph.states)))
    if due:
        where.append(table.c.state_next <= now)
    if failing:
        where.append(table.c.state_attempts > 0)
    # SQLite keeps times as text, and rows written by different routes (server defaults, the
    # engine) may spell the same instant differently: the cursor keeps the text as stored.
    sqlite = store.dialect.name == "sqlite"
    raw_next: Any = type_coerce(table.c.state_next, String) if sqlite else table.c.state_next
    query = select(table, raw_next.label(CURSOR_NEXT))
    if by_index:
        where.append(table.c.state_next.is_not(None))
        if after is not None:
            when, last = _cursor(after, 2)
            seen = storable_text(store, when) if sqlite else parse_time(when)
            last = parse_pk(store, t, last)
            # The first conjunct gives the index its starting point; the rest breaks ties.
            where.append(and_(raw_next >= seen, or_(raw_next > seen, pk > last)))
        query = query.order_by(table.c.state_next, pk)
    else:
        if after is not None:
            (last,) = _cursor(after, 1)
            where.append(pk > parse_pk(store, t, last))
        query = query.order_by(pk)
    query = query.where(*where).limit(limit + 1)
    rows = _read_rows(store, t, query, raw_next)
    more = len(rows) > limit
    rows = rows[:limit]
    cursor = None
    if more and rows:
        last_row = rows[-1]
        key = [last_row[t.pk]]
        if by_index:
            when = last_row[CURSOR_NEXT]
            key = [when if isinstance(when, str) else when.isoformat(), last_row[t.pk]]
        cursor = json.dumps(key, default=str)  # a UUID key as its text
    for r in rows:
        del r[CURSOR_NEXT]
    return RowPage(rows, cursor, by_index)


def _read_rows(store: Store, t: TrackedModel, query: Any, raw_next: Any) -> list[dict[str, Any]]:
    """The rows ``query`` selects; if one holds a value that cannot be read (``_unreadable``),
    each row is read on its own, such values shown as the database's text: one row with a
    garbage time must not take the whole page (and the way to fix it) down with it."""
    with store.engine.connect() as conn:
        try:
            return [dict(r._mapping) for r in conn.execute(query)]
        except Exception as exc:
            if not is_unreadable(exc):
                raise
    as_text = raw_next if store.dialect.name == "sqlite" else cast(raw_next, String)
    pk = t.table.c[t.pk]
    with store.engine.connect() as conn:
        keys = conn.execute(query.with_only_columns(pk, as_text.label(CURSOR_NEXT))).all()
        rows = []
        for key, when in keys:
            row = readable_row(conn, t, key)
            if row is not None:
                rows.append({**row, CURSOR_NEXT: when})
    return rows


def _cursor(after: str, size: int) -> list[Any]:
    """The parts of a cursor, each to be checked by its user (``ValueError`` if not one)."""
    try:
        key = json.loads(after)
    except (ValueError, RecursionError):  # "[[[[…" nested past Python's recursion limit
        raise ValueError("not a cursor") from None
    if not isinstance(key, list) or len(key) != size:
        raise ValueError("not a cursor")
    return key


# What the database may be asked to compare with a key or a time.  Outside values (a URL, a
# cursor, a form) are checked against them first: the database would refuse some outright
# (an integer beyond the column's range, NUL in PostgreSQL text, a lone surrogate anywhere),
# which would be a 500 where the truth is "no such row" or "not a cursor".

_INT_BITS = {"smallint": 16, "int2": 16, "smallserial": 16, "integer": 32, "int": 32,
             "int4": 32, "serial": 32, "bigint": 64, "int8": 64, "bigserial": 64}


def parse_pk(store: Store, t: TrackedModel, raw: object) -> Any:
    """A primary key from outside (a URL's text, a cursor's part), typed like the column and
    within its range; ``ValueError`` if no row can have it."""
    column = t.table.c[t.pk]
    spec = column.type.compile(dialect=store.engine.dialect).lower().split("(")[0].strip()
    try:
        python_type: Any = column.type.python_type
    except NotImplementedError:  # a Django column, known by its SQL spelling
        python_type = None
    if python_type is int or (python_type is None and spec in _INT_BITS):
        if isinstance(raw, bool) or not isinstance(raw, int | str):
            raise ValueError("not a key")
        value = int(raw)
        bits = 64 if store.dialect.name == "sqlite" else _INT_BITS.get(spec, 64)
        if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise ValueError("beyond the key column's range")
        return value
    if not isinstance(raw, str):
        raise ValueError("not a key")
    if python_type is uuid.UUID or (python_type is None and spec == "uuid"):
        return uuid.UUID(raw)
    return storable_text(store, raw)


def storable_text(store: Store, raw: object) -> str:
    """``raw`` if it is text the database can hold and compare, else ``ValueError``."""
    if not isinstance(raw, str):
        raise ValueError("not text")
    try:
        raw.encode()
    except UnicodeEncodeError:
        raise ValueError("not UTF-8 text") from None
    if "\x00" in raw and store.dialect.name != "sqlite":
        raise ValueError("PostgreSQL text cannot hold NUL")
    return raw


def parse_time(raw: object) -> datetime:
    """A timezone-aware time from outside (a form, a cursor), else ``ValueError``: a naive one
    could only be compared wrongly, and the database refuses one beyond its calendar."""
    if not isinstance(raw, str):
        raise ValueError("not a time")
    when = datetime.fromisoformat(raw)
    if when.tzinfo is None:
        raise ValueError("a time without its time zone")
    try:
        when.astimezone(UTC)
    except OverflowError:
        raise ValueError("a time beyond the calendar") from None
    return when


def get_row(store: Store, t: TrackedModel, pk: Any) -> dict[str, Any] | None:
    """Row ``pk``, a value that cannot be read shown as the database's text."""
    table = t.table
    with store.engine.connect() as conn:
        try:
            row = conn.execute(select(table).where(table.c[t.pk] == pk)).first()
        except Exception as exc:
            if not is_unreadable(exc):
                raise
        else:
            return None if row is None else dict(row._mapping)
    with store.engine.connect() as conn:
        return readable_row(conn, t, pk)


def row_errors(store: Store, t: TrackedModel, pk: Any, limit: int = 20) -> list[dict[str, Any]]:
    e = _schema.errors_table
    query = (
        select(e).where(e.c.model == t.name, e.c.row_pk == str(pk))
        .order_by(e.c.id.desc()).limit(limit)
    )
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(query)]


# -- errors --------------------------------------------------------------------------------

_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")


def exception_of(kind: str, message: str) -> str:
    """The exception type an error log message names (``"Type: text"``), else its kind."""
    if kind == "timeout":
        return "timeout"
    found = _EXCEPTION.match(message)
    return found.group(1) if found else kind


def error_groups(
    store: Store, models: Sequence[str], limit: int = 2000
) -> list[dict[str, Any]]:
    """The newest ``limit`` errors of ``models``, grouped by model, state and exception
    type; the largest groups first, each with its newest error."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for e in store.recent_errors(limit=limit, models=models):
        key = (e["model"], e["state"], exception_of(e["kind"], e["message"]))
        group = groups.get(key)
        if group is None:
            groups[key] = {"model": key[0], "state": key[1], "exception": key[2], "count": 1,
                           "rows": {e["row_pk"]}, "last": e}
        else:
            group["count"] += 1
            group["rows"].add(e["row_pk"])
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


def edge_rows(
    worker_id: str, now: datetime, edges: dict[str, dict[tuple[str, str], int]]
) -> Iterable[dict[str, Any]]:
    """Rows of ``stator_edge_stats`` for one stats period's edge counts."""
    for model, counts in edges.items():
        for (source, target), count in counts.items():
            yield {"worker_id": worker_id, "model": model, "source": source, "target": target,
                   "period_end": now, "count": count}

