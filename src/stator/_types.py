"""Column types and server defaults that behave the same on SQLite and PostgreSQL.

Timestamps are always timezone-aware UTC in Python.  How a database stores them (PostgreSQL's
``timestamptz``, SQLite's fixed-width text, ``_time_text.py``) is its dialect's answer
(``SqlDialect.time_type`` and ``ts``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ColumnElement
from sqlalchemy.types import TypeDecorator, TypeEngine

from ._time_text import from_sqlite_text


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return dialect.type_descriptor(_sql_dialect(dialect).time_type())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime, got {value!r}")
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: Stator stores only timezone-aware times")
        return _sql_dialect(dialect).ts(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        return read_time(value)


def read_time(value: Any) -> datetime | None:
    """A time column's value as read (``UTCDateTime``'s result processor): SQLite's text,
    or a driver's datetime, as an aware UTC datetime."""
    if type(value) is str:
        return from_sqlite_text(value)
    if value is None:
        return None
    if isinstance(value, str):
        return from_sqlite_text(value)
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    raise TypeError(f"unexpected timestamp value {value!r}")


_DIALECTS: dict[str, Any] = {}


def _sql_dialect(dialect: Dialect) -> Any:
    """Stator's ``SqlDialect`` for an SQLAlchemy dialect, looked up once per name (a bind
    runs for every time written).  Imported here, not at the top: ``stator._store`` imports
    this module as it loads, so it cannot be imported before this module is."""
    found = _DIALECTS.get(dialect.name)
    if found is None:
        from ._store._dialects import dialect_named

        found = _DIALECTS[dialect.name] = dialect_named(dialect.name)
    return found


class utc_now_plus(ColumnElement[datetime]):
    """The database's current time plus a fixed number of seconds, for server defaults, so
    rows inserted by raw SQL that names no Stator column are still scheduled correctly."""

    inherit_cache = True

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = float(seconds)


def _seconds(element: utc_now_plus) -> str:
    # Plain decimal: ":g" rounds to 6 digits and writes 2592000 as "2.592e+06", which
    # PostgreSQL's interval syntax rejects.
    return f"{element.seconds:.6f}"


@compiles(utc_now_plus, "sqlite")
def _sqlite_now(element: utc_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    # strftime's %f gives milliseconds, which sorts correctly against our microsecond text.
    if element.seconds:
        return f"(strftime('%Y-%m-%d %H:%M:%f', 'now', '+{_seconds(element)} seconds'))"
    return "(strftime('%Y-%m-%d %H:%M:%f', 'now'))"


@compiles(utc_now_plus)
def _default_now(element: utc_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    if element.seconds:
        return f"(CURRENT_TIMESTAMP + interval '{_seconds(element)} seconds')"
    return "CURRENT_TIMESTAMP"
