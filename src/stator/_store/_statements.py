"""The statements of one tracked table, built once per model and dialect.

``Statements`` names each statement the drivers run on a tracked table; one a database lacks
(a claim for a graph with no scheduled state, ``next_claimable`` without SKIP LOCKED, the
row-by-row write where batches are cheaper) is None.  Every statement is built here, in full,
from the dialect's pieces: none is derived from another by editing its text.  Each has a
fixed shape (a batch travels as arrays or one JSON parameter), so the database can prepare it
once and reuse the plan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ._dialects import SqlDialect
from ._limit_statements import limited_claim_sql

if TYPE_CHECKING:
    from ._tracked import TrackedModel

# The columns of a batch's fenced write (``_write_sql``) and delete, as (name, SQL type).
# Only what a statement reads is sent: a delete reads the fence, and ``moved`` and
# ``changed_iso`` are read only by a table that keeps ``state_history``.
FENCE_COLUMNS = [("pk", "PK"), ("fence_state", "text"), ("fence", "timestamptz")]
SET_COLUMNS = [
    ("state", "text"), ("changed", "timestamptz"), ("next", "timestamptz"),
    ("attempts", "integer"),
]
HISTORY_COLUMNS = [("moved", "boolean"), ("changed_iso", "text")]
WRITE_COLUMNS = FENCE_COLUMNS + SET_COLUMNS + HISTORY_COLUMNS


@dataclass(frozen=True, slots=True)
class Statements:
    """A tracked table's statements.  The claim family is None when the graph has no state
    a worker runs (nothing is ever due)."""

    # Leases up to :limit due rows (:now, :limit, :lease_<i> per scheduled state), returning
    # every column in table order.
    claim: str | None = None
    # The same claim without the dialect's relaxed commit: for a claim that joins a caller's
    # transaction, whose own writes must stay durable.
    claim_joined: str | None = None
    # The rows a claim with the same parameters could have taken (``_unreadable``).
    claim_candidates: str | None = None
    # One ``due`` row per scheduled state: its earliest ``state_next``.
    next_due: str | None = None
    # ``next_due`` as a claim at :now sees it, rows locked elsewhere left out (SKIP LOCKED).
    next_claimable: str | None = None
    # What a claim runs first in its transaction (``claim`` then runs in one, never in
    # autocommit): a model with limits on PostgreSQL (``SqlDialect.limit_lock``); else None.
    claim_lock: str | None = None
    # The fenced write-back of a batch (moves and stays), returning the keys it applied.
    write: str = ""
    # ``write`` and a wake-up notification as one statement (:table); None without NOTIFY.
    write_notify: str | None = None
    # The fenced write of one row, positional (``?1``…); where writes run row by row.
    write_row: str | None = None
    # ``write`` and ``write_row`` that also set the model's ``stator_write_columns`` from the
    # batch's ``x0``, ``x1``… (``?10``, ``?11``… in ``write_row``): a write that carries a
    # handler's values; None for a model without such columns.
    write_extra: str | None = None
    write_row_extra: str | None = None
    # The fenced delete of a batch, returning the keys it deleted.
    delete: str = ""


def build_statements(t: TrackedModel, d: SqlDialect) -> Statements:
    """Every statement of ``t`` on ``d``, built once (at start-up), each in full."""
    table, pk = t.quoted_table, t.quoted_pk
    scheduled = [s.name for s in t.graph.scheduled_states()]
    extra = f" AND ({t.where})" if t.where else ""
    # Not while the dashboard has the model paused: the claim reads the pause itself (a
    # one-time filter on a table of a few rows), so pausing costs no query of its own and a
    # pause holds from the next claim on.
    extra += f" AND NOT EXISTS (SELECT 1 FROM stator_paused WHERE model = {_literal(t.name)})"
    claims = Statements()
    if scheduled:
        returning = ", ".join(t.quoted_columns)
        stamps = _claim_stamps(t)
        # The states whose rows run a handler: the only ones a priority orders (the others
        # are claimed to be deleted or to follow a timed edge, which order does not matter).
        handled = frozenset(s.name for s in t.graph.states.values() if s.automatic)

        def claim(lease_commit: str) -> str:
            if t.limited:
                return _limited_claim_sql(t, d, returning, extra, stamps, lease_commit)
            return _claim_sql(
                table, pk, scheduled, d, returning, extra, t.priority, t.lease_column, stamps,
                lease_commit, handled,
            )

        order = "state_next" if t.priority is None else f"{t.priority} DESC, state_next"
        claims = Statements(
            claim=claim(d.lease_commit),
            # For a claim that joins a caller's transaction (a Django ``atomic`` block): the
            # relaxed commit would reach the caller's own writes, so it stays durable.
            claim_joined=claim(""),
            claim_candidates=_claim_candidates_sql(table, pk, scheduled, d, extra, order),
            next_due=" UNION ALL ".join(
                f"SELECT min(state_next) AS due FROM {table} "
                f"WHERE state = '{name}' AND state_next IS NOT NULL{extra}"
                for name in scheduled
            ),
            next_claimable=(
                _next_claimable_sql(table, scheduled, d, extra) if d.skip_locked else None
            ),
            claim_lock=d.limit_lock(t.name) if t.limited else None,
        )
    source = d.batch_source(_typed(t, FENCE_COLUMNS))
    write = _write_sql(t, d)
    more = t.write_columns_sql
    return replace(
        claims,
        write=write,
        write_notify=d.with_notify(write),
        write_row=_sqlite_write_row(t, d) if d.row_by_row_writes else None,
        write_extra=_write_sql(t, d, more) if more else None,
        write_row_extra=_sqlite_write_row(t, d, more) if more and d.row_by_row_writes else None,
        delete=(
            f"DELETE FROM {table} WHERE ({pk}, state, state_next) IN "
            f"(SELECT v.pk, v.fence_state, v.fence FROM {source}) RETURNING {pk}"
        ),
    )


def _write_sql(t: TrackedModel, d: SqlDialect, more: tuple[tuple[str, str], ...] = ()) -> str:
    """The fenced write-back of a batch; with ``more`` ((quoted column, its type)…), those
    columns set too, from the batch's ``x0``, ``x1``…, under the same fence."""
    table, pk = t.quoted_table, t.quoted_pk
    read = FENCE_COLUMNS + SET_COLUMNS + (HISTORY_COLUMNS if t.history_type else [])
    columns = _typed(t, read) + [(f"x{i}", sqltype) for i, (_, sqltype) in enumerate(more)]
    source = d.batch_source(columns)
    history = ""
    if t.history_type is not None:
        append = d.history_append(table, t.history_type)
        history = (
            f", state_history = CASE WHEN v.moved THEN {append} "
            f"ELSE {table}.state_history END"
        )
    sets = "".join(f", {name} = v.x{i}" for i, (name, _) in enumerate(more))
    return (
        f"UPDATE {table} SET state = v.state, state_changed = v.changed, "
        f"state_next = v.next, state_attempts = v.attempts{history}{sets} "
        f"FROM {source} WHERE {table}.{pk} = v.pk AND {table}.state = v.fence_state "
        f"AND {table}.state_next = v.fence RETURNING {table}.{pk}"
    )


def _typed(t: TrackedModel, columns: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``columns`` with the key's own SQL type in place of ``PK``."""
    return [(n, t.pk_type if ty == "PK" else ty) for n, ty in columns]


def _next_claimable_sql(table: str, states: list[str], d: SqlDialect, extra: str) -> str:
    """``next_due`` as a claim sees it: a row due by ``:now`` that another session holds
    locked (the application's ``SELECT … FOR UPDATE``, another worker mid-claim) is passed by,
    exactly as the claim's ``SKIP LOCKED`` passes it by; rows not due yet all count.  Only
    the first unlocked due row of each state is locked, for the rest of this read."""
    return " UNION ALL ".join(
        f"SELECT * FROM (SELECT state_next AS due FROM {table} WHERE state = '{name}' "
        f"AND state_next IS NOT NULL AND state_next <= :now{extra} "
        f"ORDER BY state_next LIMIT 1{d.skip_locked}) AS n{i} "
        f"UNION ALL SELECT min(state_next) AS due FROM {table} "
        f"WHERE state = '{name}' AND state_next > :now{extra}"
        for i, name in enumerate(states)
    )


def _literal(text: str) -> str:
    """A SQL string literal (a table name, written into a statement built once)."""
    return "'" + text.replace("'", "''") + "'"


def _sqlite_write_row(
    t: TrackedModel, d: SqlDialect, more: tuple[tuple[str, str], ...] = ()
) -> str:
    """The same fenced write for one row, positional parameters (SQLite: ``_write_rows``):
    ?1 state, ?2 changed, ?3 next, ?4 attempts, ?5 pk, ?6 fence state, ?7 fence, ?8 moved,
    ?9 changed (ISO, for the history), then ``more``'s columns from ?10 on.  Without a
    history, plain ``?`` in the order state, changed, next, attempts, ``more``'s columns, pk,
    fence state, fence, bound from a tuple: sqlite3 binds numbered ones by name only, from a
    dict made per row (about 2 µs of a row's write)."""
    table, pk = t.quoted_table, t.quoted_pk
    sets = "state = ?1, state_changed = ?2, state_next = ?3, state_attempts = ?4"
    fence = "state = ?6 AND state_next = ?7"
    if t.history_type is None:
        plain = re.compile(r"\?\d")  # in the fragments above only, never in a quoted name
        more_sets = "".join(f", {name} = ?" for name, _ in more)
        return (f"UPDATE {table} SET {plain.sub('?', sets)}{more_sets} "
                f"WHERE {pk} = ? AND {plain.sub('?', fence)}")
    more_sets = "".join(f", {name} = ?{10 + i}" for i, (name, _) in enumerate(more))
    append = d.history_append(table, t.history_type, "?1", "?9")
    history = f"state_history = CASE WHEN ?8 THEN {append} ELSE {table}.state_history END"
    return f"UPDATE {table} SET {sets}, {history}{more_sets} WHERE {pk} = ?5 AND {fence}"


def _due_branches(
    table: str, pk: str, states: list[str], d: SqlDialect, picked: str, extra: str, order: str,
    handled: frozenset[str] | None = None, columns: str = "*", limit: str = ":limit",
) -> str:
    """Each state's oldest due rows, at most ``limit`` per state (the rows a claim may take),
    as ``columns`` of them.

    Given ``handled`` (the states that run a handler), an ``order`` by priority applies to
    those states only: the others take their oldest due rows, by the (state, state_next)
    index, however many rows wait in them."""
    return " UNION ALL ".join(
        f"SELECT {columns} FROM "
        f"({_state_rows(table, pk, name, d, picked, extra, order, handled, limit)}) AS b{i}"
        for i, name in enumerate(states)
    )


def _state_rows(
    table: str, pk: str, name: str, d: SqlDialect, picked: str, extra: str, order: str,
    handled: frozenset[str] | None, limit: str, lock: bool = True,
) -> str:
    """One state's share of ``_due_branches``; ``lock``: with the dialect's SKIP LOCKED."""
    if handled is None or order == "state_next":
        return _due_rows(table, pk, name, d, picked, extra, order, limit=limit, lock=lock)
    if name in handled:
        return _due_rows(
            table, pk, name, d, picked, extra, order, d.prioritized_due, limit, lock)
    return _due_rows(table, pk, name, d, picked, extra, "state_next", limit=limit, lock=lock)


def _due_rows(
    table: str, pk: str, name: str, d: SqlDialect, picked: str, extra: str, order: str,
    due: str = "state_next <= :now", limit: str = ":limit", lock: bool = True,
) -> str:
    """A state's oldest due rows, at most ``limit`` (one state's share of a claim)."""
    return (
        f"SELECT {pk}, state{picked} FROM {table} "
        f"WHERE state = '{name}' AND state_next IS NOT NULL AND {due}{extra} "
        f"ORDER BY {order} LIMIT {limit}{d.skip_locked if lock else ''}"
    )


def _share_cte(
    table: str, pk: str, states: list[str], d: SqlDialect, extra: str, order: str,
    handled: frozenset[str] | None,
) -> str:
    """``claim_share AS (…), `` for a claim of several states where claims lock rows
    (``SqlDialect.fair_share``): each state's due rows counted without a lock, at most
    :limit; empty where it does not apply."""
    if len(states) < 2:
        return ""
    def count(i: int, name: str) -> str:
        rows = _state_rows(table, pk, name, d, "", extra, order, handled, ":limit", lock=False)
        return f"(SELECT count(*) FROM ({rows}) AS n{i})"

    share = d.fair_share([count(i, name) for i, name in enumerate(states)])
    return "" if share is None else f"claim_share AS (SELECT {share} AS r), "


def _claim_candidates_sql(
    table: str, pk: str, states: list[str], d: SqlDialect, extra: str, order: str
) -> str:
    """The rows a claim with these parameters could have taken (due now), and those it did
    take if it committed (their ``state_next`` is its lease): where to look for a row the
    claim could not read (``_unreadable``)."""
    leased = " UNION ALL ".join(
        f"SELECT {pk}, state FROM {table} WHERE state = '{name}' AND state_next = :lease_{i}"
        for i, name in enumerate(states)
    )
    return f"{_due_branches(table, pk, states, d, '', extra, order)} UNION {leased}"


def _claim_stamps(t: TrackedModel) -> str:
    """The claim's ``SET`` of ``t.claim_stamps``: only rows taken up for a handler (of an
    automatic state) are stamped, not those claimed for a deletion or a timed edge."""
    if not t.claim_stamps:
        return ""
    handled = ", ".join(_literal(s.name) for s in t.graph.states.values() if s.automatic)
    sets = []
    for column, when in t.claim_stamps.items():
        value = f"COALESCE({column}, :now)" if when == "first" else ":now"
        sets.append(f", {column} = CASE WHEN state IN ({handled}) THEN {value} ELSE {column} END")
    return "".join(sets)


def _limited_claim_sql(
    t: TrackedModel, d: SqlDialect, returning: str, extra: str, stamps: str, lease_commit: str
) -> str:
    """The claim of a graph with a concurrency limit (``_limit_statements``); its unlimited
    states take their rows as ``_claim_sql`` takes them."""
    order = "state_next" if t.priority is None else f"{t.priority} DESC, state_next"
    picked = f", state_next, {t.priority}" if t.priority is not None else ", state_next"

    def plain_rows(name: str) -> str:
        return _due_rows(t.quoted_table, t.quoted_pk, name, d, picked, extra, order)

    return limited_claim_sql(
        t, d, plain_rows, extra, returning, _claim_update(t, stamps), lease_commit
    )


def _claim_update(t: TrackedModel, stamps: str) -> str:
    """The claim's ``SET``: the lease per state, copied to the lease column, the stamps."""
    states = t.graph.scheduled_states()
    lease = " ".join(f"WHEN '{s.name}' THEN :lease_{i}" for i, s in enumerate(states))
    copy = f", {t.lease_column} = CASE state {lease} END" if t.lease_column is not None else ""
    return f"state_next = CASE state {lease} END{copy}{stamps}"


def _claim_sql(
    table: str, pk: str, states: list[str], d: SqlDialect, returning: str, extra: str = "",
    priority: str | None = None, lease_column: str | None = None, stamps: str = "",
    lease_commit: str = "", handled: frozenset[str] | None = None,
) -> str:
    """One statement that leases up to :limit due rows, shared fairly between states.

    Each state contributes its oldest due rows (an index range scan per state); the picks are
    interleaved round-robin (first of each state, then second of each...) so a state with a
    backlog cannot starve the others.  PostgreSQL skips rows other workers hold.  With a
    ``priority`` column, each state's rows are taken highest priority first, then oldest.
    With a ``lease_column``, the lease is copied there too; ``stamps`` are more of the
    ``SET`` (``_claim_stamps``); ``lease_commit`` is the dialect's relaxed commit, or empty.
    """
    order = "state_next" if priority is None else f"{priority} DESC, state_next"
    picked = f", {priority}" if priority is not None else ""
    # Where claims lock rows, each state locks only its fair share of :limit (the round
    # robin below keeps exactly the rows it would keep from :limit per state).
    share = _share_cte(table, pk, states, d, extra, order, handled)
    limit = "(SELECT r FROM claim_share)" if share else ":limit"
    rank = f"row_number() OVER (ORDER BY {order}) AS rn"
    if d.rank_in_branches:
        # Each state's rows ranked in that state's own branch: the same ranks as below.
        due = _due_branches(table, pk, states, d, f", state_next{picked}", extra, order,
                            handled, f"{pk}, state_next{picked}, {rank}", limit)
    else:
        branches = _due_branches(
            table, pk, states, d, f", state_next{picked}", extra, order, handled, limit=limit)
        due = (f"SELECT {pk}, state_next{picked}, row_number() OVER "
               f"(PARTITION BY state ORDER BY {order}) AS rn FROM ({branches}) AS c")
    lease = " ".join(f"WHEN '{name}' THEN :lease_{i}" for i, name in enumerate(states))
    copy = f", {lease_column} = CASE state {lease} END" if lease_column is not None else ""
    return (
        f"WITH {share}due AS ({due}), "
        f"picked AS (SELECT {pk} FROM due ORDER BY rn, {order} LIMIT :limit) "
        f"UPDATE {table} SET state_next = CASE state {lease} END{copy}{stamps} "
        f"WHERE {d.picked_rows(pk)}{lease_commit} RETURNING {returning}"
    )

