"""The claim of a graph with concurrency limits (``State(max_running=…)``), in one statement.

Built only for a graph that declares a limit: any other graph's claim is the plain one of
``_statements.py``, unchanged.  Per limited state the statement finds the keys that have due
rows (a skip scan over the ``(state, key, state_next)`` index: one probe per key, however
many rows each key has due), counts the running rows of every key at once (``state_next``
still equal to the lease the claim copied into the model's lease column, and still in the
future: an expired lease frees its room by itself), and takes from each key at most its
room, oldest due first.  The picks of every key are interleaved round robin (each key's
first, then each key's second…) and then shared with the other states as the plain claim
shares them.  A key at its limit costs its probe, never a scan of its due rows, and never
holds up another key; but every key with due rows costs its probe in every claim (about
0.03-0.05 ms each on PostgreSQL here: see ``stator bench --scenario limits``).  Running rows
are counted without the worker's own filters (``where``, the pause): a limit holds across
every worker, whatever each one runs.
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
            branches.append(f"SELECT {pk}, state, state_next{picked}, 1 AS stator_krn "
                            f"FROM ({plain}) AS b{i}")
            continue
        ctes.extend(_room_ctes(t, i, state.name, limit, extra))
        due = (f"state = '{state.name}' AND state_next IS NOT NULL AND state_next <= :now"
               f"{extra}")
        key = limit[1]
        where = due if key is None else f"{due} AND {key} = r.stator_lkey"
        # No key's room is larger than its limit (a value a mapping leaves out: the claim's).
        most = limit[0]
        cap = ":limit" if isinstance(most, Mapping) else str(int(most))
        source = d.key_rows(f"r{i}", table, pk, f"state_next{picked}", where, order, cap)
        branches.append(
            f"SELECT {pk}, '{state.name}' AS state, state_next{picked}, stator_krn FROM "
            f"(SELECT q.{pk}, q.state_next{q_picked}, r.stator_room, row_number() OVER "
            f"(PARTITION BY r.stator_lkey ORDER BY {q_order}) AS stator_krn FROM {source} "
            f"WHERE r.stator_room > 0) AS p{i} WHERE stator_krn <= stator_room"
        )
    union = " UNION ALL ".join(branches)
    return (
        f"WITH RECURSIVE {', '.join(ctes)}, "
        f"due AS (SELECT {pk}, state_next{picked}, row_number() OVER "
        f"(PARTITION BY state ORDER BY stator_krn, {order}) AS rn FROM ({union}) AS c), "
        f"picked AS (SELECT {pk} FROM due ORDER BY rn, {order} LIMIT :limit) "
        f"UPDATE {table} SET {update} "
        f"WHERE {pk} IN (SELECT {pk} FROM picked){lease_commit} RETURNING {returning}"
    )


def _room_ctes(t: TrackedModel, i: int, name: str, limit: Limit, extra: str) -> list[str]:
    """``r{i}``: each key of state ``name`` with due rows and its room (one row, for a limit
    without a key); with a key, ``k{i}`` first: the keys themselves, by skip scan."""
    table, lease = t.quoted_table, t.lease_column
    most, key = limit
    if key is None:
        running = (f"SELECT count(*) FROM {table} WHERE state = '{name}' "
                   f"AND state_next > :now AND {lease} = state_next")
        return [f"r{i} AS (SELECT 1 AS stator_lkey, {most} - ({running}) AS stator_room)"]
    due = f"state = '{name}' AND state_next IS NOT NULL AND state_next <= :now{extra}"
    # Each next key as an ordered index probe (``ORDER BY … LIMIT 1``, not ``min()``, which
    # SQLite answers by reading every entry after the last key).
    keys = (
        f"k{i}(stator_k) AS (SELECT (SELECT {key} FROM {table} WHERE {due} "
        f"ORDER BY {key} LIMIT 1) "
        f"UNION ALL SELECT (SELECT {key} FROM {table} WHERE {due} "
        f"AND {key} > k{i}.stator_k ORDER BY {key} LIMIT 1) "
        f"FROM k{i} WHERE k{i}.stator_k IS NOT NULL)"
    )
    if isinstance(most, Mapping):
        whens = " ".join(f"WHEN {_literal(v)} THEN {int(n)}" for v, n in most.items())
        cap = f"CASE k{i}.stator_k {whens} END"
    else:
        cap = str(int(most))
    # Running rows are counted once for every key (one range of the claim index: the rows
    # held or scheduled later), not once per key; a value a mapping does not list has no
    # limit: its room is the whole claim's.
    busy = (f"b{i}(stator_k, stator_n) AS (SELECT {key}, count(*) FROM {table} "
            f"WHERE state = '{name}' AND state_next > :now AND {lease} = state_next "
            f"GROUP BY {key})")
    room = (f"SELECT k{i}.stator_k AS stator_lkey, "
            f"COALESCE({cap} - COALESCE(b{i}.stator_n, 0), :limit) AS stator_room "
            f"FROM k{i} LEFT JOIN b{i} ON b{i}.stator_k = k{i}.stator_k "
            f"WHERE k{i}.stator_k IS NOT NULL")
    return [keys, busy, f"r{i} AS ({room})"]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
