"""Database errors that waiting cannot cure, and the models they break.

A lost connection or a busy database is an outage: retried with backoff until it ends.  A
read-only database file, a missing table, a denied permission or a statement the database
cannot parse stays wrong until someone fixes it.  Retrying those in a loop hides them, so:
a worker run ``--until-idle`` stops with one clear error; a long-running worker marks the
model broken, says so once a minute, tries it again a minute later, and keeps running the
other models meanwhile.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable

from ._db_errors import connection_lost, driver_error
from .errors import StatorError

log = logging.getLogger("stator.worker")

RETRY_EVERY = 60.0  # seconds between tries (and log lines) of a broken model

SQLITE_INCURABLE = (
    "readonly database", "no such table", "no such column", "syntax error",
    "unable to open database file", "not authorized", "permission denied", "malformed",
)
PG_INCURABLE_CLASSES = ("42", "28")  # syntax error or access rule violation; authorization
PG_INCURABLE_CODES = ("25006", "3D000")  # read-only transaction; no such database
# Refused at connection time, where psycopg has no SQLSTATE to give: only the text says so.
PG_INCURABLE_TEXT = ("does not exist", "password authentication failed", "no pg_hba.conf entry")


class DatabaseUnusable(StatorError):
    """The database refuses what Stator needs, and waiting will not change that."""


def is_incurable(exc: BaseException) -> bool:
    """True for database errors that stay until someone changes the database."""
    orig = driver_error(exc)
    if orig is None or connection_lost(exc):
        return False
    code = getattr(orig, "sqlstate", None)
    if isinstance(code, str) and code:
        return code[:2] in PG_INCURABLE_CLASSES or code in PG_INCURABLE_CODES
    text = str(orig).lower()
    if isinstance(orig, sqlite3.Error):
        return any(fragment in text for fragment in SQLITE_INCURABLE)
    return any(fragment in text for fragment in PG_INCURABLE_TEXT)


# A full disk may be freed by someone (an outage, retried); a one-off run (``--until-idle``)
# gives up once it has stayed full this long (seconds).
DISK_FULL_PATIENCE = 30.0
PG_DISK_FULL = "53100"


def is_disk_full(exc: BaseException) -> bool:
    """The database could not write for lack of space (SQLite's SQLITE_FULL, PostgreSQL's
    disk_full)."""
    orig = getattr(exc, "orig", None) or exc
    if getattr(orig, "sqlstate", None) == PG_DISK_FULL:
        return True
    return isinstance(orig, sqlite3.Error) and "database or disk is full" in str(orig).lower()


def disk_full(exc: BaseException) -> DatabaseUnusable:
    """The error that ends an ``--until-idle`` run whose database's disk stays full."""
    return DatabaseUnusable(
        f"the database's disk is full: {first_line(exc)} (still full after "
        f"{DISK_FULL_PATIENCE:g}s; free some space and run again)"
    )


def first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip()
    return text.splitlines()[0][:300] if text else type(orig).__name__


class Broken:
    """What is broken (a model's name, or ``database`` for Stator's own tables), since when,
    and when to try it again."""

    def __init__(
        self, retry_every: float = RETRY_EVERY, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.retry_every = retry_every
        self._monotonic = monotonic
        self._retry_at: dict[str, float] = {}
        self._logged_at: dict[str, float] = {}

    def mark(self, key: str, exc: BaseException) -> None:
        now = self._monotonic()
        self._retry_at[key] = now + self.retry_every
        last = self._logged_at.get(key)
        if last is None or now - last >= self.retry_every:
            self._logged_at[key] = now
            log.error("%s is broken, and waiting will not fix it: %s (tried again every %gs; "
                      "the other models keep running)", key, first_line(exc), self.retry_every,
                      extra={"action": "model_broken"})

    def skip(self, key: str) -> bool:
        """True while a broken key waits for its next try."""
        retry_at = self._retry_at.get(key)
        return retry_at is not None and self._monotonic() < retry_at

    def healed(self, key: str) -> None:
        if self._retry_at.pop(key, None) is not None:
            self._logged_at.pop(key, None)
            log.info("%s works again", key, extra={"action": "model_healed"})

    def is_broken(self, key: str) -> bool:
        return key in self._retry_at

    def next_retry(self) -> float | None:
        """The monotonic time of the next try of anything broken."""
        return min(self._retry_at.values(), default=None)
