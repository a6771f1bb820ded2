"""A worker process's runtime, in its parts:

- ``_coordinator``: the public ``Worker`` and its claim/dispatch loop, which owns the rest;
- ``_handlers``: the handler executor (handler threads, the event loop for async handlers,
  deadlines, replacing threads that hang or die);
- ``_writer``: batched, fenced write-back on a writer thread of its own;
- ``_listener``: the wake-up listener (LISTEN/NOTIFY on PostgreSQL, ``data_version`` on SQLite);
- ``_housekeeping``: heartbeat, stats periods, the last words of a run;
- ``_calls``: the thread the coordinator's database steps run on;
- ``_state``: what the parts share (options, the events every thread watches, the counts).

``serving`` is the public serve loop around a worker (signals, the metrics port, exit codes)
that ``stator run``, ``manage.py runstator`` and the launcher's schedulers share; it is
imported from its module, not re-exported here, so that importing the engine does not load
the terminal's libraries.

The constants below are re-exported for reading; a test that changes one patches the module
that reads it (``stator._worker._listener.LISTEN_WAIT``, say), not this package.
"""

from ._coordinator import COORDINATOR, MAX_SLEEP, Worker
from ._handlers import DEATH_WINDOW
from ._housekeeping import HEARTBEAT_EVERY, KEEP_HISTORY, STATS_EVERY
from ._listener import (
    LISTEN_WAIT,
    LISTENER_JOIN,
    POLL_WITHOUT_NOTIFY,
    PROBE_TIMEOUT,
    SQLITE_POLL,
    SQLITE_SLOW_POLL,
)
from ._state import TOO_MANY_HUNG, ModelCounters, RunSummary, WorkerOptions
from ._writer import FLUSH_DELAY, WRITER, WriteBatch

__all__ = [
    "COORDINATOR",
    "DEATH_WINDOW",
    "FLUSH_DELAY",
    "HEARTBEAT_EVERY",
    "KEEP_HISTORY",
    "LISTENER_JOIN",
    "LISTEN_WAIT",
    "MAX_SLEEP",
    "POLL_WITHOUT_NOTIFY",
    "PROBE_TIMEOUT",
    "SQLITE_POLL",
    "SQLITE_SLOW_POLL",
    "STATS_EVERY",
    "TOO_MANY_HUNG",
    "WRITER",
    "ModelCounters",
    "RunSummary",
    "Worker",
    "WorkerOptions",
    "WriteBatch",
]
