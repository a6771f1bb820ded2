"""A claim read on the DB-API cursor of the claim's own SQLAlchemy connection (SQLite's
sqlite3, PostgreSQL's psycopg), its values converted here as the statement's result
processors would convert them.

What a claim costs beyond the database's own work is Python: through SQLAlchemy (the
compiled-statement cache, the result's metadata, a ``Row`` per row, each processor behind its
type's wrapper) a few µs per claimed row, as much as the rest of the row's handling on the
claiming thread.  Here the statement runs as the driver takes it (sqlite3 takes ``:name``
parameters as written; psycopg's ``%(name)s`` are compiled once), and each row becomes a tuple
by one generated function that calls only the columns' processors that exist; Stator's own
time columns go through ``read_time`` itself.  The processors are those SQLAlchemy would
pick for the cursor's description, asked once, at the first claim.

The claim still runs on the SQLAlchemy connection and in its transaction (or its autocommit
statement), so a value that cannot be read fails the claim as before (``_unreadable``); a
DB-API error is raised as SQLAlchemy's, as the worker's retry policy expects, saying whether
it took the connection with it; a lost connection is invalidated, as SQLAlchemy does, so the
transaction's end does not fail on it again and the pool does not lend it again.  The
engine's cursor events still fire for whoever listens (statement counters, tracing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.schema import Column

from .._types import UTCDateTime, read_time

# A row's values, and the values already converted in this claim's shared columns.
Converter = Callable[[Sequence[Any], dict[Any, Any]], Sequence[Any]]

# The DB-API drivers whose cursor a claim may use directly: synchronous, and taking the
# statement as SQLAlchemy compiles it for them.
RAW_DRIVERS = frozenset({"pysqlite", "psycopg"})


class RawClaim:
    """One model's claim statement as the driver's SQL text and the function that converts
    its rows."""

    __slots__ = ("_columns", "_convert", "_dialect", "_ready", "_shared", "sql")

    def __init__(
        self, sql: str, columns: Sequence[Column[Any]], dialect: Dialect, shared: int
    ) -> None:
        """``sql`` in the driver's parameter style.  ``shared``: the column whose values a
        claim's rows share (the lease, one per state), converted once per value per claim."""
        self.sql = sql
        self._columns = list(columns)
        self._dialect = dialect
        self._shared = shared
        self._convert: Converter | None = None  # None: every value is used as read
        self._ready = False

    @classmethod
    def build(
        cls, sql: str, columns: Sequence[Column[Any]], dialect: Dialect, shared: int
    ) -> RawClaim | None:
        """The claim ``sql`` (``text()``'s ``:name`` style) on the DB-API cursor, or None
        where the driver is not one a claim may use so."""
        if dialect.driver not in RAW_DRIVERS:
            return None
        if dialect.driver == "psycopg":
            from sqlalchemy import text

            sql = str(text(sql).compile(dialect=dialect))  # ``%(name)s``, ``%`` doubled
        elif "\\" in sql:  # ``text()`` reads ``\:`` as an escaped colon, sqlite3 would not
            return None
        return cls(sql, columns, dialect, shared)

    def fetch(self, conn: Connection, params: dict[str, Any]) -> Sequence[Sequence[Any]]:
        """The claim's rows, converted (the caller's transaction is open on ``conn``)."""
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None  # an open connection's
        cursor = dbapi.cursor()
        events = conn.dispatch
        try:
            if events.before_cursor_execute:
                events.before_cursor_execute(conn, cursor, self.sql, params, None, False)
            cursor.execute(self.sql, params)
            rows: Sequence[Sequence[Any]] = cursor.fetchall()
            if events.after_cursor_execute:
                events.after_cursor_execute(conn, cursor, self.sql, params, None, False)
            if not self._ready:
                self._prepare(cursor.description)
        except self._dialect.loaded_dbapi.Error as exc:
            lost = self._dialect.is_disconnect(exc, dbapi, cursor)
            if lost:  # as SQLAlchemy does: the transaction's end must not use it again
                conn.invalidate(exc)
            error = DBAPIError.instance(
                self.sql, params, exc, self._dialect.loaded_dbapi.Error,
                connection_invalidated=lost, dialect=self._dialect,
            )
            raise error from exc
        finally:
            cursor.close()
        convert = self._convert
        if convert is None:
            return rows
        seen: dict[Any, Any] = {}
        return [convert(row, seen) for row in rows]

    def _prepare(self, description: Sequence[Any] | None) -> None:
        """The converter, from the processors SQLAlchemy picks for each column and the type
        the driver describes it with (PostgreSQL's numeric types depend on it)."""
        codes = [d[1] for d in description] if description else [None] * len(self._columns)
        processors = [_processor(c, self._dialect, code)
                      for c, code in zip(self._columns, codes, strict=True)]
        self._convert = row_converter(processors, self._shared)
        self._ready = True


def _processor(
    column: Column[Any], dialect: Dialect, code: Any = None
) -> Callable[[Any], Any] | None:
    """What SQLAlchemy applies to ``column``'s values as read (the driver describing them
    as ``code``), or None for nothing.  Stator's time columns read their values with
    ``read_time`` itself: ``UTCDateTime``'s processor is ``read_time`` behind the type
    wrapper's frames, where the stored type converts nothing."""
    kind = column.type
    impl = kind.dialect_impl(dialect)
    if isinstance(kind, UTCDateTime):
        stored = kind.load_dialect_impl(dialect)
        if stored.dialect_impl(dialect).result_processor(dialect, code) is None:
            return read_time
    return impl.result_processor(dialect, code)


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
