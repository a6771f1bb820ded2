"""A database's errors, told apart whichever layer wrapped them, without importing SQLAlchemy.

Stator's statements raise a driver's error (sqlite3's, psycopg's) wrapped with what the
worker needs to judge it: the driver's error itself (``orig``) and whether the connection
was lost with it (``connection_invalidated``).  Two wrappers have that shape: SQLAlchemy's
``DBAPIError`` (the SQLAlchemy driver's statements) and ``DriverError`` (statements run on
a DB-API connection of Stator's own, without SQLAlchemy: the Django driver's path, issue 21
item 9).  The worker's error handling (outages, incurable errors, unwritable rows) asks this
module, so that a process which never imported SQLAlchemy — a ``runstator`` worker, once
nothing on its path needs it — does not import it only to ask: an error of SQLAlchemy's
cannot exist in a process that has not loaded ``sqlalchemy.exc``.
"""

from __future__ import annotations

import sys


class DriverError(Exception):
    """A driver's error raised by a statement run without SQLAlchemy, as SQLAlchemy's
    ``DBAPIError`` would wrap it: ``orig`` the driver's error, ``statement`` the SQL (None
    when connecting failed), ``connection_invalidated`` whether the connection is gone."""

    def __init__(
        self, orig: BaseException, statement: str | None = None,
        connection_invalidated: bool = False,
    ) -> None:
        super().__init__(str(orig))
        self.orig = orig
        self.statement = statement
        self.connection_invalidated = connection_invalidated


def database_errors() -> tuple[type[BaseException], ...]:
    """The wrappers of a database's errors this process can raise, for an ``except``
    clause (evaluated only when an exception reaches it)."""
    sqlalchemy_errors = sys.modules.get("sqlalchemy.exc")
    wrapper = getattr(sqlalchemy_errors, "DBAPIError", None)
    return (DriverError,) if wrapper is None else (DriverError, wrapper)


def is_database_error(exc: BaseException) -> bool:
    """A driver's error, wrapped by SQLAlchemy or by Stator (what ``except DBAPIError``
    caught before this module)."""
    return isinstance(exc, database_errors())


def connection_lost(exc: BaseException) -> bool:
    """A wrapped driver's error that took its connection with it."""
    return is_database_error(exc) and bool(getattr(exc, "connection_invalidated", False))


def driver_error(exc: BaseException) -> BaseException | None:
    """The driver's own error under a wrapped one; None for any other exception."""
    return getattr(exc, "orig", None) if is_database_error(exc) else None


def named(exc: BaseException, names: tuple[str, ...]) -> bool:
    """A wrapped driver's error of one of the DB-API's kinds ``names`` (``OperationalError``,
    say): SQLAlchemy's wrapper by its class (which SQLAlchemy picked by the names in the
    driver error's class hierarchy), Stator's by those names themselves."""
    if isinstance(exc, DriverError):
        return any(c.__name__ in names for c in type(exc.orig).__mro__)
    return is_database_error(exc) and any(c.__name__ in names for c in type(exc).__mro__)
