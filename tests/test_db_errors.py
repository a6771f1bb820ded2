"""A driver's error judges alike wrapped by SQLAlchemy (``DBAPIError``) or by Stator
(``DriverError``, statements run without SQLAlchemy), and the judging needs no SQLAlchemy."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import psycopg
import pytest
from sqlalchemy.exc import DBAPIError

from stator._db_errors import DriverError, connection_lost, driver_error, is_database_error
from stator._incurable import is_disk_full, is_incurable
from stator._outage import is_transient
from stator._store._unreadable import is_unwritable

DRIVER_ERRORS = [
    sqlite3.OperationalError("database is locked"),
    sqlite3.OperationalError("no such table: orders"),
    sqlite3.OperationalError("database or disk is full"),
    sqlite3.OperationalError("malformed JSON"),
    sqlite3.IntegrityError("UNIQUE constraint failed: orders.id"),
    psycopg.OperationalError("server closed the connection unexpectedly"),
    psycopg.errors.UndefinedTable("relation \"orders\" does not exist"),
    psycopg.errors.InvalidTextRepresentation("invalid input syntax for type json"),
    psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
]


def judged(exc: BaseException) -> tuple[bool, ...]:
    return (is_database_error(exc), is_transient(exc), is_incurable(exc), is_disk_full(exc),
            is_unwritable(exc), connection_lost(exc))


@pytest.mark.parametrize("orig", DRIVER_ERRORS, ids=lambda e: f"{type(e).__name__}:{e}")
@pytest.mark.parametrize("lost", [False, True])
def test_either_wrapper_is_judged_alike(orig: Exception, lost: bool) -> None:
    wrapped = DBAPIError.instance("SELECT 1", {}, orig, type(orig).__mro__[-3],
                                  connection_invalidated=lost)
    ours = DriverError(orig, "SELECT 1", connection_invalidated=lost)
    assert judged(ours) == judged(wrapped)
    assert driver_error(ours) is orig and driver_error(wrapped) is orig


def test_what_the_worker_retries_and_what_it_does_not() -> None:
    assert is_transient(DriverError(sqlite3.OperationalError("database is locked")))
    assert not is_transient(DriverError(sqlite3.OperationalError("no such table: x")))
    assert is_incurable(DriverError(sqlite3.OperationalError("no such table: x")))
    assert not is_transient(DriverError(sqlite3.IntegrityError("UNIQUE constraint failed")))
    assert is_transient(DriverError(sqlite3.IntegrityError("?"), connection_invalidated=True))
    assert driver_error(ValueError("not a database's")) is None


def test_judging_a_database_error_imports_no_sqlalchemy() -> None:
    """These modules' own imports (the package's ``__init__``, which loads the engine, is
    left out: a step of issue 21 item 9 still to come)."""
    code = (
        "import sqlite3, sys, types, importlib.util\n"
        "package = types.ModuleType('stator')\n"
        "package.__path__ = importlib.util.find_spec('stator').submodule_search_locations\n"
        "sys.modules['stator'] = package\n"
        "from stator._db_errors import DriverError, database_errors\n"
        "from stator._outage import is_transient\n"
        "from stator._incurable import is_incurable\n"
        "exc = DriverError(sqlite3.OperationalError('database is locked'))\n"
        "assert is_transient(exc) and not is_incurable(exc)\n"
        "try:\n    raise exc\nexcept database_errors():\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('sqlalchemy')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
