"""Logging handler failures without letting a flood of them fill a disk.

Each failure is one WARNING line naming the model, row, state, attempt and the exception's
class and message.  The traceback goes to DEBUG every time, and to WARNING the first time a
distinct error (model, state, exception class and message) is seen, so an operator sees
where each kind of failure comes from once without reading the same stack a thousand times.
At most ``burst`` lines are written per ``window`` seconds; what was left out is counted and
said in one line when logging resumes.
"""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ._policy import Failed

# A logger of its own, so that an application (or the demo, whose failures are the show)
# can quiet handler failures without quieting outages and the worker's other news.
log = logging.getLogger("stator.worker.failures")

BURST = 20  # failure lines per window
WINDOW = 60.0  # seconds
DISTINCT_KEPT = 1000  # distinct errors remembered (their tracebacks were shown once)
_EXCEPTION = r"^([A-Za-z_][\w.]*)(?::|$)"  # compiled at its first use (``re`` caches it)


def exception_of(kind: str, message: str) -> str:
    """The exception type an error log message names (``"Type: text"``), else its kind: the
    dashboard's error groups and the failures' ``exception`` label in ``/metrics``."""
    if kind == "timeout":
        return "timeout"
    found = re.match(_EXCEPTION, message)
    return found.group(1) if found else kind


class FailureLog:
    def __init__(
        self, burst: int = BURST, window: float = WINDOW,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.window = window
        self._monotonic = monotonic
        self._window_start = monotonic()
        self._logged = 0  # lines in the current window
        self._skipped = 0  # failures not logged since the last line
        self._seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    def failed(self, model: str, pk: Any, state: str, attempt: int, failure: Failed) -> None:
        """Log one handler failure (rate-limited)."""
        log.debug("%s %s in state %s: %s\n%s", model, pk, state, failure.message,
                  failure.traceback, extra={"action": "handler_failed"})
        if not self._may_log():
            self._skipped += 1
            return
        if self._skipped:
            log.warning("%d more handler failure(s) not logged (at most %d lines per %gs); "
                        "`stator status` lists them", self._skipped, self.burst, self.window,
                        extra={"action": "handler_failed_skipped"})
            self._skipped = 0
        first_line = failure.message.splitlines()[0] if failure.message else failure.kind
        key = (model, state, first_line)
        first_time = key not in self._seen
        self._remember(key)
        what = "timed out" if failure.kind == "timeout" else "failed"
        if first_time and failure.traceback:
            log.warning("%s %s in state %s %s (attempt %d): %s\n%s", model, pk, state, what,
                        attempt, failure.message, failure.traceback.rstrip(),
                        extra={"action": "handler_failed"})
        else:
            log.warning("%s %s in state %s %s (attempt %d): %s", model, pk, state, what,
                        attempt, first_line, extra={"action": "handler_failed"})

    def _may_log(self) -> bool:
        now = self._monotonic()
        if now - self._window_start >= self.window:
            self._window_start = now
            self._logged = 0
        if self._logged >= self.burst:
            return False
        self._logged += 1
        return True

    def _remember(self, key: tuple[str, str, str]) -> None:
        self._seen[key] = None
        self._seen.move_to_end(key)
        while len(self._seen) > DISTINCT_KEPT:
            self._seen.popitem(last=False)
