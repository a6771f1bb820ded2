"""Riding out database outages (a lost connection, a restarting server, SQLite busy).

Each activity that talks to the database counts its consecutive failures, backs off
exponentially, and logs an outage twice: when it starts and when it ends — never once per
retry, which is how other schedulers filled their users' disks.
"""

from __future__ import annotations

import logging

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

log = logging.getLogger("stator.worker")


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: the database was unreachable or busy, not told something wrong."""
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


def short(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


class Outage:
    def __init__(self, activity: str, first_delay: float = 0.25, max_delay: float = 30.0):
        self.activity = activity
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.failures = 0

    def failed(self, exc: BaseException) -> float:
        """Record a failure; returns how many seconds to wait before trying again."""
        self.failures += 1
        if self.failures == 1:
            log.warning("%s: database unavailable, retrying with backoff: %s", self.activity,
                        short(exc), extra={"action": "db_retry"})
        delay: float = self.first_delay * 2.0 ** min(self.failures - 1, 16)
        return min(delay, self.max_delay)

    def recovered(self) -> None:
        if self.failures:
            log.info("%s: database reachable again after %d failed attempt(s)", self.activity,
                     self.failures, extra={"action": "db_recovered"})
            self.failures = 0
