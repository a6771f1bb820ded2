"""A claim read on the DB-API cursor of the claim's own SQLAlchemy connection (SQLite), its
values converted here as the statement's result processors would convert them.

SQLite runs in this process, so what a claim costs beyond SQLite's own work is Python:
through SQLAlchemy (the compiled-statement cache, the result's metadata, a ``Row`` per row,
each processor behind its type's wrapper) about 2 µs per claimed row, as much as the rest of
the row's handling on the claiming thread.  Here the statement runs as written (sqlite3 takes
``:name`` parameters), and each row becomes a tuple by one generated function that calls only
the columns' processors that exist; Stator's own time columns read their text straight.

The claim still runs on the SQLAlchemy connection and in its transaction (``BEGIN
IMMEDIATE``), so a value that cannot be read fails the claim inside it, as before
(``_unreadable``), and a DB-API error is raised as SQLAlchemy's, as the worker's retry policy
expects.  The statement alone skips the engine's cursor events, as the row-by-row write did
already (``SqlOperations._write_rows``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.schema import Column

from .._types import UTCDateTime, read_time

# A row's values, and the values already converted in this claim's shared columns.
Converter = Callable[[Sequence[Any], dict[Any, Any]], Sequence[Any]]


class RawClaim:
    """One model's claim statement as SQL text and the function that converts its rows."""

    __slots__ = ("convert", "sql")

    def __init__(self, sql: str, convert: Converter | None) -> None:
        self.sql = sql
        self.convert = convert  # None: every value is used as the driver returns it

    @classmethod
    def build(
        cls, sql: str, columns: Sequence[Column[Any]], dialect: Dialect, shared: int
    ) -> RawClaim:
        """``shared``: the column whose values a claim's rows share (the lease, one per
        state), converted once per value per claim."""
        return cls(sql, row_converter([_processor(c, dialect) for c in columns], shared))

    def fetch(self, dbapi: sqlite3.Connection, params: dict[str, Any]) -> list[Sequence[Any]]:
        """The claim's rows, converted (the caller's transaction is open on ``dbapi``)."""
        cursor = dbapi.cursor()
        try:
            cursor.execute(self.sql, params)
            rows: list[Sequence[Any]] = cursor.fetchall()
        except sqlite3.Error as exc:
            raise DBAPIError.instance(self.sql, params, exc, sqlite3.Error) from exc
        finally:
            cursor.close()
        convert = self.convert
        if convert is None:
            return rows
        seen: dict[Any, Any] = {}
        return [convert(row, seen) for row in rows]


def _processor(column: Column[Any], dialect: Dialect) -> Callable[[Any], Any] | None:
    """What SQLAlchemy applies to ``column``'s values as read, or None for nothing.  Stator's
    time columns read their text with ``read_time`` itself: ``UTCDateTime``'s processor is
    ``read_time`` behind the type wrapper's frames, where the stored type converts nothing."""
    kind = column.type
    impl = kind.dialect_impl(dialect)
    if isinstance(kind, UTCDateTime):
        stored = kind.load_dialect_impl(dialect)
        if stored.dialect_impl(dialect).result_processor(dialect, None) is None:
            return read_time
    return impl.result_processor(dialect, None)


def row_converter(
    processors: Sequence[Callable[[Any], Any] | None], shared: int = -1
) -> Converter | None:
    """A function making a row's tuple with ``processors`` applied, column by column (None:
    the value as it is); None when no column has one.  Unrolled, as ``plain_row_builder``
    is: a loop over the columns costs about twice as much per row.  Column ``shared`` is
    converted once per distinct value, looked up in the dict the caller passes: the rows
    of a claim share their lease, and one time parsed and kept per claim costs less than
    one per row (the write formats it once too)."""
    if all(p is None for p in processors):
        return None
    scope: dict[str, Any] = {f"_p{i}": p for i, p in enumerate(processors) if p is not None}

    def value(i: int, processor: Callable[[Any], Any] | None) -> str:
        if processor is None:
            return f"row[{i}]"
        if i == shared:
            return f"(seen[v] if (v := row[{i}]) in seen else seen.setdefault(v, _p{i}(v)))"
        return f"_p{i}(row[{i}])"

    values = ", ".join(value(i, p) for i, p in enumerate(processors))
    exec(f"def convert(row, seen):\n    return ({values},)\n", scope)  # indexes only
    convert: Converter = scope["convert"]
    return convert
