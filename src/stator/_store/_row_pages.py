"""Rows page by page, and one row with its errors: what the dashboard's row pages read.

Rows are paged by keyset, never ``OFFSET``: through the claim index on
``(state, state_next)`` (plus the primary key as tie-breaker) for a state the engine
schedules, by primary key otherwise.  A row holding a value the driver cannot load is shown
with that value as the database's text (``_unreadable``), not as an error page.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, String, and_, cast, or_, select, type_coerce

from . import _schema
from ._outside_values import parse_pk, parse_time, storable_text
from ._tracked import TrackedModel
from ._unreadable import is_unreadable, readable_row

if TYPE_CHECKING:
    from .interface import Driver as Store

PAGE_SIZE = 50
CURSOR_NEXT = "stator_cursor_next"


@dataclass(frozen=True)
class RowPage:
    """One page of rows and the cursor of the next one (None on the last page)."""

    rows: list[dict[str, Any]]
    next_cursor: str | None
    by_index: bool  # paged through the claim index (state_next, pk) rather than by pk


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
    as_text = store.dialect.times_as_text
    raw_next: Any = type_coerce(table.c.state_next, String) if as_text else table.c.state_next
    query = select(table, raw_next.label(CURSOR_NEXT))
    if by_index:
        where.append(table.c.state_next.is_not(None))
        if after is not None:
            when, last = _cursor(after, 2)
            seen = storable_text(store, when) if as_text else parse_time(when)
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
    as_text = raw_next if store.dialect.times_as_text else cast(raw_next, String)
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
