"""The claim of a graph with concurrency limits (``State(max_running=…)``), in one statement.

Built only for a graph that declares a limit: any other graph's claim is the plain one of
``_statements.py``, unchanged.  Per limited state the statement counts the running rows of
every key at once (``state_next`` still equal to the lease the claim copied into the model's
lease column, and still in the future: an expired lease frees its room by itself), then walks
a window of the keys that have due rows (a skip scan over the ``(state, key, state_next)``
index: one probe per key, however many rows each key has due): the keys after the last one
the previous claim of this worker served, wrapping round to the first, until it has found as
many keys with room as the claim takes rows.  It takes from each of those keys at most its
room, oldest due first; the picks are interleaved round robin (each key's first in the walk's
order, then each key's second…) and then shared with the other states as the plain claim
shares them.  So successive claims serve the keys in turn, every one of them, and a claim's
cost does not grow with the number of keys: it probes at most ``:limit`` keys with room plus
the full ones it passes (each holds a running row, so no more of them than rows running).
A full key costs its probe, never a scan of its due rows, and never holds up another key.
Running rows are counted without the worker's own filters (``where``, the pause): a limit
holds across every worker, whatever each one runs.  Where the walk starts (``:lcur_<i>``) is
the worker's own memory (``SqlOperations.claimed``): each worker walks the keys in turn.

A state may be under more limits, each per a key of its own (``TrackedModel.also_limits``: a
django.tasks task under its queue's limit and its own path's): the walk is over the first
key; a row whose other key is at its limit is not picked, and the picks are then cut to each
other key's room, so every limit holds.  A key of the walk whose due rows all wait on another
limit counts in the window without giving a row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from .._limits import Limit
from ._dialects import SqlDialect

if TYPE_CHECKING:
    from ._tracked import TrackedModel


def limited_claim_sql(
    t: TrackedModel, d: SqlDialect, plain_rows: Callable[[str], str], extra: str,
    returning: str, update: str, lease_commit: str,
) -> str:
    """The claim of ``t`` (whose graph has a limit).  ``plain_rows(name)`` is the plain
    claim's due rows of an unlimited state; ``update`` is the ``SET`` list it writes."""
    table, pk = t.quoted_table, t.quoted_pk
    priority = t.priority
    picked = f", {priority}" if priority is not None else ""
    q_picked = f", q.{priority}" if priority is not None else ""
    order = "state_next" if priority is None else f"{priority} DESC, state_next"
    q_order = "q.state_next" if priority is None else f"q.{priority} DESC, q.state_next"
    ctes: list[str] = []
    branches: list[str] = []
    for i, state in enumerate(t.graph.scheduled_states()):
        limit = t.limits.get(state.name)
        if limit is None:
            plain = plain_rows(state.name)
            branches.append(f"SELECT {pk}, state, state_next{picked}, 1 AS stator_krn, "
                            f"0 AS stator_walk FROM ({plain}) AS b{i}")
            continue
        ctes.extend(_room_ctes(t, i, state.name, limit, extra))
        # Every other limit is per a key (``_tracked`` refuses one without).
        also = [(m, k) for m, k in t.also_limits.get(state.name, ()) if k is not None]
        ctes.extend(_running(t, f"s{i}_{j}", state.name, k) for j, (_m, k) in enumerate(also))
        # A row whose other key is at its limit is not picked (its key's room is kept for
        # rows that can run): one filter per other limit, on the few running rows.
        blocked = "".join(
            f" AND NOT EXISTS (SELECT 1 FROM s{i}_{j} WHERE s{i}_{j}.stator_k = {k} "
            f"AND s{i}_{j}.stator_n >= {_cap(m, f's{i}_{j}.stator_k')})"
            for j, (m, k) in enumerate(also)
        )
        due = (f"state = '{state.name}' AND state_next IS NOT NULL AND state_next <= :now"
               f"{extra}{blocked}")
        key = limit[1]
        where = due if key is None else f"{due} AND {key} = r.stator_lkey"
        # No key's room is larger than its limit (a value a mapping leaves out: the claim's).
        most = limit[0]
        cap = ":limit" if isinstance(most, Mapping) else str(int(most))
        others = "".join(f", {k}" for _m, k in also)
        source = d.key_rows(f"r{i}", table, pk, f"state_next{picked}{others}", where, order,
                            cap)
        q_others = "".join(f", q.{k} AS stator_o{j}" for j, (_m, k) in enumerate(also))
        o_others = "".join(f", stator_o{j}" for j in range(len(also)))
        branch = (
            f"SELECT {pk}, '{state.name}' AS state, state_next{picked}, stator_krn, stator_walk"
            f"{o_others} FROM (SELECT q.{pk}, q.state_next{q_picked}{q_others}, "
            f"r.stator_room, r.stator_walk, row_number() OVER "
            f"(PARTITION BY r.stator_lkey ORDER BY {q_order}) AS stator_krn FROM {source} "
            f"WHERE r.stator_room > 0) AS p{i} WHERE stator_krn <= stator_room"
        )
        for j, (m, _k) in enumerate(also):  # the last keeps only the union's columns
            kept = o_others if j < len(also) - 1 else ""
            branch = _within_other(branch, i, j, m, f"{pk}, state, state_next{picked}, "
                                   f"stator_krn, stator_walk{kept}", order)
        branches.append(branch)
    union = " UNION ALL ".join(branches)
    return (
        f"WITH RECURSIVE {', '.join(ctes)}, "
        f"due AS (SELECT {pk}, state_next{picked}, row_number() OVER "
        f"(PARTITION BY state ORDER BY stator_krn, stator_walk, {order}) AS rn "
        f"FROM ({union}) AS c), "
        f"picked AS (SELECT {pk} FROM due ORDER BY rn, {order} LIMIT :limit) "
        f"UPDATE {table} SET {update} "
        f"WHERE {d.picked_rows(pk)}{lease_commit} RETURNING {returning}"
    )


def _room_ctes(t: TrackedModel, i: int, name: str, limit: Limit, extra: str) -> list[str]:
    """``r{i}``: the keys of state ``name`` this claim looks at, each with its room and its
    place in the walk (one row, for a limit without a key).  With a key, the window of keys:
    ``ka{i}`` walks the keys with due rows after ``:lcur_{i}`` (the last key the previous
    claim served), ``kb{i}`` wraps round to the first ones, each an index probe per key,
    until ``:limit`` keys with room are found (no claim serves more keys than it takes
    rows); a key at its limit is passed by without counting.  So a claim probes at
    most ``:limit`` keys plus the full ones (each holds a running row: no more than the
    workers run), however many keys have due rows."""
    table, lease = t.quoted_table, t.lease_column
    most, key = limit
    if key is None:
        running = (f"SELECT count(*) FROM {table} WHERE state = '{name}' "
                   f"AND state_next > :now AND {lease} = state_next")
        return [f"r{i} AS (SELECT 1 AS stator_lkey, {most} - ({running}) AS stator_room, "
                f"1 AS stator_walk)"]
    due = f"state = '{name}' AND state_next IS NOT NULL AND state_next <= :now{extra}"
    cursor = f":lcur_{i}"
    # Running rows are counted once for every key (one range of the claim index: the rows
    # held or scheduled later), not once per key; a value a mapping does not list has no
    # limit: its room is the whole claim's.  The running rows are read as a subquery with a
    # LIMIT no count reaches, which SQLite does not merge into the GROUP BY: merged, it
    # would read the whole state in key order (the key index) to skip the grouping's sort,
    # not the range of rows not due yet (the claim index).
    busy = _running(t, f"b{i}", name, key)

    def walk(k: str, first: str, go_on: str, counted: str) -> str:
        # Each next key as an ordered index probe (``ORDER BY … LIMIT 1``, not ``min()``,
        # which SQLite answers by reading every entry after the last key); ``stator_w``: the
        # keys with room before this one.
        # A key's running rows by one range of the key index (not a lookup in ``b{i}``,
        # which PostgreSQL would scan whole for every key).
        held = (f"SELECT count(*) FROM {table} WHERE state = '{name}' "
                f"AND {key} = {k}.stator_k AND state_next > :now AND {lease} = state_next")
        has_room = f"CASE WHEN ({held}) >= {_cap(most, f'{k}.stator_k')} THEN 0 ELSE 1 END"
        return (
            f"{k}(stator_k, stator_w, stator_p) AS (SELECT (SELECT {key} FROM {table} "
            f"WHERE {due}{first} ORDER BY {key} LIMIT 1), {counted}, 0 "
            f"UNION ALL SELECT (SELECT {key} FROM {table} WHERE {due} "
            f"AND {key} > {k}.stator_k ORDER BY {key} LIMIT 1), "
            f"{k}.stator_w + {has_room}, {k}.stator_p + 1 FROM {k} "
            f"WHERE {k}.stator_k IS NOT NULL{go_on} AND {k}.stator_w + {has_room} < :limit)"
        )

    after = walk(f"ka{i}", f" AND {key} > {cursor}", "", "0")
    # Round to the first keys (those up to the cursor), for the room the keys after it left.
    found = (f"(SELECT count(*) FROM ka{i} LEFT JOIN b{i} ON b{i}.stator_k = ka{i}.stator_k "
             f"WHERE ka{i}.stator_k IS NOT NULL "
             f"AND COALESCE(b{i}.stator_n < {_cap(most, f'ka{i}.stator_k')}, TRUE))")
    before = walk(f"kb{i}", "", f" AND COALESCE(kb{i}.stator_k < {cursor}, TRUE)", found)
    window = (f"w{i}(stator_k, stator_p) AS (SELECT stator_k, stator_p FROM ka{i} "
              f"WHERE stator_k IS NOT NULL UNION ALL SELECT stator_k, stator_p + "
              f"(SELECT count(*) FROM ka{i}) FROM kb{i} WHERE stator_k IS NOT NULL "
              f"AND COALESCE(stator_k <= {cursor}, TRUE) AND stator_w < :limit)")
    room = (f"SELECT w{i}.stator_k AS stator_lkey, "
            f"COALESCE({_cap(most, f'w{i}.stator_k')} - COALESCE(b{i}.stator_n, 0), :limit) "
            f"AS stator_room, w{i}.stator_p AS stator_walk "
            f"FROM w{i} LEFT JOIN b{i} ON b{i}.stator_k = w{i}.stator_k")
    return [busy, after, before, window, f"r{i} AS ({room})"]


_UNCAPPED = 1_000_000_000_000  # rows: more than any table holds


def _running(t: TrackedModel, cte: str, name: str, key: str) -> str:
    """``cte(stator_k, stator_n)``: the running rows of state ``name`` per value of ``key``."""
    lease = t.lease_column
    return (f"{cte}(stator_k, stator_n) AS (SELECT stator_k, count(*) FROM "
            f"(SELECT {key} AS stator_k FROM {t.quoted_table} "
            f"WHERE state = '{name}' AND state_next > :now AND {lease} = state_next "
            f"LIMIT {_UNCAPPED}) AS h{cte} GROUP BY stator_k)")


def _within_other(branch: str, i: int, j: int, most: int | Mapping[str, int], columns: str,
                  order: str) -> str:
    """``branch``'s picks cut to the room of their other key (column ``stator_o{j}``, its
    running rows in ``s{i}_{j}``): a task under both a queue's and its own limit."""
    other = f"x.stator_o{j}"
    room = (f"COALESCE({_cap(most, other)} - COALESCE((SELECT stator_n FROM s{i}_{j} "
            f"WHERE s{i}_{j}.stator_k = {other}), 0), :limit)")
    return (
        f"SELECT {columns} FROM (SELECT x.*, row_number() OVER (PARTITION BY {other} "
        f"ORDER BY x.stator_krn, x.stator_walk, {order}) AS stator_on, {room} AS stator_or "
        f"FROM ({branch}) AS x) AS y{i}_{j} WHERE stator_on <= stator_or"
    )


def _cap(most: int | Mapping[str, int], value: str) -> str:
    """The limit of the key ``value``: NULL for a value a mapping does not list."""
    if isinstance(most, Mapping):
        whens = " ".join(f"WHEN {_literal(v)} THEN {int(n)}" for v, n in most.items())
        return f"CASE {value} {whens} END"
    return str(int(most))


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
