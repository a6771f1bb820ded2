"""Concurrency limits as declared on a state (``State(max_running=…, limit_key=…)``): what a
declaration may say, checked when the graph class is created.  Pure: the claim that enforces
a limit is SQL (``_store/_limit_statements.py``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

# A state's limit: ``max_running`` (one number, or one per listed key value) and the column
# it is counted per, or None to count the whole state.
Limit = tuple[int | Mapping[str, int], str | None]

# Handler threads per worker: each may hold a database connection (the pool is sized from
# it), and a server's connections and a process's threads run out long before 100,000.
MAX_CONCURRENCY = 256


def limit_problems(
    limit: int | Mapping[str, int] | None, key: str | None, automatic: bool
) -> Iterator[str]:
    """What is wrong with a state's ``max_running`` and ``limit_key``; whether ``key`` is a
    column of the table is checked when a model is tracked (the graph knows no table)."""
    if limit is None:
        if key is not None:
            yield "limit_key needs max_running=N"
        return
    if not automatic:
        yield "max_running only applies to a state with a handler (only those rows run)"
    values = list(limit.values()) if isinstance(limit, Mapping) else [limit]
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
        yield f"max_running must be an int >= 1, or a mapping of key values to one (got {limit!r})"
    if isinstance(limit, Mapping):
        if key is None:
            yield "max_running as a mapping (a limit per key value) needs limit_key"
        if not limit or not all(isinstance(k, str) for k in limit):
            yield "max_running as a mapping needs at least one key value, each a str"
    if key is not None and not (isinstance(key, str) and key.isidentifier()):
        yield f"limit_key must be a column name (got {key!r})"


def next_cursor(cursor: object, served: list[object]) -> object:
    """Where the next claim's walk of a state's keys starts (``:lcur_<i>``): after the last
    key this claim served, in the walk's order (the keys after ``cursor``, then those up to
    it), or ``cursor`` again when it served none.  Compared in Python: where its order is not
    the database's (strings under a collation), the walk still moves on by at least one key
    a claim, so every key keeps being served, only less evenly."""
    if not served:
        return cursor
    try:
        wrapped = [k for k in served if cursor is not None and k <= cursor]  # type: ignore[operator]
        return max(wrapped or served)  # type: ignore[type-var]
    except TypeError:  # values that do not compare: any key served moves the walk on
        return served[-1]
