"""The coordinator's database steps (a claim, the idle check, housekeeping): each runs on a
thread of its own while the coordinator waits for it, and a failure becomes a later retry,
a model marked broken, or the end of an until-idle run, never a worker that dies or spins.

The step runs on its own thread because a call can hang for as long as the network takes to
be declared dead (the client settings in ``_dialects``), and the handlers' deadlines must not
wait for it: ``meanwhile`` is the coordinator's own work (deadlines, results, flushes), done
while it waits.  Backing off does not sleep here either, for the same reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import wait

from .. import _incurable, _metrics
from .._db_errors import database_errors
from .._incurable import Broken, DatabaseUnusable, first_line, is_disk_full, is_incurable
from .._outage import Outage, is_transient
from ._calls import Calls


class DatabaseSteps:
    """Runs the coordinator's database steps (``run``) and remembers when the next may be
    tried (``retry_at``, monotonic) after a transient failure."""

    def __init__(
        self, thread_done: Callable[[], None], until_idle: bool, broken: Broken,
        meanwhile: Callable[[], None], wait_at_most: Callable[[], float],
    ) -> None:
        self._thread_done = thread_done
        self._until_idle = until_idle
        self._broken = broken
        self._meanwhile = meanwhile
        self._wait_at_most = wait_at_most
        self._outage = Outage("worker")
        self._calls: Calls | None = None
        self.retry_at = 0.0  # no database step before this (monotonic): backing off

    def run(self, action: Callable[[], bool | None], what: str = "the database") -> bool:
        """Run a database step; a transient database error is retried later, with backoff;
        one that waiting cannot cure marks ``what`` broken (or ends an until-idle run)."""
        if time.monotonic() < self.retry_at:
            return False
        if self._calls is None:
            self._calls = Calls(self._thread_done)
        future = self._calls.submit(action)
        while not wait([future], timeout=self._wait_at_most()).done:
            self._meanwhile()
        try:
            result = future.result()
        except database_errors() as exc:
            _metrics.db_error()
            if is_incurable(exc):
                self.unusable(what, exc)
                return False
            if not is_transient(exc):
                raise
            self.retry_at = time.monotonic() + self._outage.failed(exc)
            self._give_up_if_disk_stays_full(exc)
            return False
        self._outage.recovered()
        self._broken.healed(what)
        return bool(result)

    def unusable(self, what: str, exc: BaseException) -> None:
        """``what`` (a model, or a step) failed in a way waiting cannot cure."""
        if self._until_idle:
            raise DatabaseUnusable(
                f"{what}: {first_line(exc)} (waiting will not fix this: check the database's "
                "permissions, that it is writable, and that `stator migrate` was run)"
            ) from exc
        self._broken.mark(what, exc)

    def _give_up_if_disk_stays_full(self, exc: BaseException) -> None:
        """``--until-idle``: a disk that stays full ends the run with one clear error after
        ``DISK_FULL_PATIENCE`` instead of a wait for ever (a long-running worker waits: space
        may be freed)."""
        if (self._until_idle and is_disk_full(exc)
                and self._outage.lasted() >= _incurable.DISK_FULL_PATIENCE):
            raise _incurable.disk_full(exc) from exc

    def close(self) -> None:
        if self._calls is not None:
            self._calls.close()
