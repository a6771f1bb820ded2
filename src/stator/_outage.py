"""Riding out database outages (a lost connection, a restarting server, SQLite busy).

Each activity that talks to the database counts its consecutive failures, backs off
exponentially, and logs an outage twice: when it starts and when it ends — never once per
retry, which is how other schedulers filled their users' disks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from . import _backoff
from ._db_errors import connection_lost, is_database_error, named
from ._incurable import is_incurable

log = logging.getLogger("stator.worker")


TRANSIENT_NAMES = ("OperationalError", "InterfaceError")
DRIVER_MODULES = ("django.db", "sqlite3", "psycopg")


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: the database was unreachable or busy, not told something wrong.

    A driver's errors as Stator's statements raise them (``_db_errors``), and the same kinds
    raised by Django's ORM or by the drivers themselves (a Django handler's transaction
    commits through Django, not SQLAlchemy).
    """
    if is_incurable(exc):
        return False
    if is_database_error(exc):
        return named(exc, TRANSIENT_NAMES) or connection_lost(exc)
    kind = type(exc)
    return kind.__name__ in TRANSIENT_NAMES and kind.__module__.startswith(DRIVER_MODULES)


def short(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


class Outage:
    def __init__(
        self, activity: str, first_delay: float = 0.25, max_delay: float = 30.0,
        remind_every: float | None = None, monotonic: Callable[[], float] = time.monotonic,
    ):
        self.activity = activity
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.remind_every = remind_every  # seconds between "still unavailable" lines
        self.failures = 0
        self._monotonic = monotonic
        self._since = self._reminded = 0.0

    def failed(self, exc: BaseException) -> float:
        """Record a failure; returns how many seconds to wait before trying again."""
        self.failures += 1
        now = self._monotonic()
        if self.failures == 1:
            self._since = self._reminded = now
            log.warning("%s: database unavailable, retrying with backoff: %s", self.activity,
                        short(exc), extra={"action": "db_retry"})
        elif self.remind_every is not None and now - self._reminded >= self.remind_every:
            self._reminded = now
            log.warning("%s: database still unavailable after %.0fs: %s", self.activity,
                        now - self._since, short(exc), extra={"action": "db_retry"})
        return _backoff.delay(self.failures, self.first_delay, self.max_delay)

    def lasted(self) -> float:
        """Seconds since the current outage began (0 when there is none)."""
        return self._monotonic() - self._since if self.failures else 0.0

    def recovered(self) -> None:
        if self.failures:
            log.info("%s: database reachable again after %d failed attempt(s)", self.activity,
                     self.failures, extra={"action": "db_recovered"})
            self.failures = 0
