"""Serving a worker in a process: what ``stator run``, ``manage.py runstator`` and the
launcher's schedulers share around ``Worker.run``.

- ``serve_metrics``: the Prometheus metrics port, before the worker starts;
- ``serve``: run the worker to its end with the log lines a process shows at start and stop,
  and the exit code a supervisor reads (``EXIT_HUNG`` after too many hung handlers);
- ``run_with_signals`` / ``stop_signals``: SIGINT or SIGTERM once stops the worker gracefully
  (running handlers finish, the rest is handed back), a second one exits 130 at once (leases
  expire, nothing is lost);
- ``when_reachable``: a worker made once its database answers, for a service started before
  its database.

The liveness file is the worker's own (touched on every heartbeat, ``WorkerOptions``).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from .._board import ThreadState
from .._console import error_line, fail, stderr_may_be_terminal
from .._db_errors import database_errors
from .._outage import Outage, is_transient
from ..errors import StatorError
from ._coordinator import COORDINATOR, Worker
from ._state import RunSummary

if TYPE_CHECKING:
    from .._stator import Stator

log = logging.getLogger("stator")

# A worker stopped because too many handlers hung (``TOO_MANY_HUNG``): the process must be
# restarted to get their threads and connections back.  EX_TEMPFAIL: "try again".
EXIT_HUNG = 75
# A second SIGINT or SIGTERM: the shell's code for "ended by SIGINT".
EXIT_FORCED = 130


def serve_metrics(port: int | None, host: str = "127.0.0.1") -> None:
    """Serve the worker's Prometheus metrics if a port is given (``stator run`` and
    ``manage.py runstator``); without one, metrics cost nothing (see ``_metrics``)."""
    if port is None:
        return
    from .. import _metrics

    _metrics.serve(port, host)
    log.info("metrics on http://%s:%d/metrics", host, port, extra={"action": "metrics_start"})


def serve(
    stator: Stator, worker: Worker, with_signals: bool = True, freeze: bool = True
) -> RunSummary:
    """Run a worker until it stops, logging its start and end (``stator run``, and Django's
    ``manage.py runstator``).  ``with_signals=False`` off the main thread (``--reload``).
    ``freeze=False`` where the worker is not the process's own (``call_command`` in a test
    suite): objects frozen there would never be collected once they became garbage."""
    log.info(
        "worker %s: %s on %s, concurrency %d", worker.id,
        ", ".join(t.label for t in worker.tracked), stator.url, worker.options.concurrency,
        extra={"action": "worker_start"},
    )
    # Everything made so far (modules: Django's, SQLAlchemy's, the app's) lives as long as
    # the process: set aside from the collector, it is not scanned by every full collection,
    # nor at exit (where scanning it took over a second on a busy 2-core machine).
    if freeze:
        gc.freeze()
    summary = run_with_signals(worker, with_signals)
    log.info(
        "worker %s stopped (%s): %d rows processed, %d transitions in %.1fs",
        worker.id, summary.reason, summary.processed, summary.transitions, summary.seconds,
        extra={"action": "worker_stop"},
    )
    exit_if_hung(worker, summary)
    return summary


def exit_if_hung(worker: Worker, summary: RunSummary) -> None:
    """A run stopped by too many hung handlers ends its process with ``EXIT_HUNG`` and one
    line saying why, so that a supervisor (systemd, Kubernetes, the launcher) restarts it."""
    if not summary.needs_restart:
        return
    message = (f"stopped: more than {worker.options.hung_cap} handler threads hung past their "
               f"deadlines (--max-hung), {summary.hung} still running; exit {EXIT_HUNG} so that "
               "the process is restarted (only a new one frees their threads and connections)")
    if threading.current_thread() is not threading.main_thread():
        # runstator --reload serves off the main thread, where sys.exit would end only this
        # thread and leave the process up without a worker; the worker has drained already.
        error_line(message)
        os._exit(EXIT_HUNG)
    fail(message, EXIT_HUNG)


def force_exit(message: str) -> NoReturn:
    """The second stop signal: no waiting for anything, not even the interpreter's exit (nor
    an import of rich, in a signal handler, where stderr is no terminal)."""
    if stderr_may_be_terminal():
        from .. import _console

        _console.err.print(message, highlight=False)
    else:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    os._exit(EXIT_FORCED)


@contextmanager
def stop_signals(stop: Callable[[str], None], forced: str) -> Iterator[None]:
    """SIGINT or SIGTERM once: ``stop`` gracefully.  A second one of either: exit 130 at
    once, printing ``forced``.  The previous handlers are restored afterwards."""
    received = 0

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal received
        received += 1
        name = signal.Signals(signum).name
        if received > 1:
            force_exit(forced)
        log.info("received %s: stopping gracefully (Ctrl-C or SIGTERM again to force)", name,
                 extra={"action": "signal"})
        stop(f"signal {name}")

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def when_reachable(make: Callable[[], Worker]) -> Worker | None:
    """``make()`` once the database can be reached: a line when it cannot, one a minute
    while it stays so, backoff in between; None if SIGINT or SIGTERM came first."""
    outage = Outage("stator run", remind_every=60.0)
    stopped = threading.Event()
    with stop_signals(lambda _reason: stopped.set(), "forced exit"):
        while True:
            try:
                made = make()
            except database_errors() as exc:
                if not is_transient(exc):
                    raise
                if stopped.wait(outage.failed(exc)):
                    return None
                continue
            outage.recovered()
            return made


def run_with_signals(worker: Worker, with_signals: bool = True) -> RunSummary:
    """Run the worker off the main thread; the main thread waits on the worker's board with a
    short timeout (HarvestMan's design) so signals, which Python delivers only to it, still
    arrive."""
    result: list[RunSummary] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(worker.run())
        except BaseException as exc:
            failure.append(exc)
            worker.board.poke()
        finally:
            worker.store.thread_done()

    forced = "forced exit: leases will expire and the rows will be run again"
    with stop_signals(worker.stop, forced) if with_signals else nullcontext():
        thread = threading.Thread(target=target, name="stator-coordinator")
        thread.start()
        while thread.is_alive() and worker.board.state_of(COORDINATOR) != ThreadState.STOPPED:
            worker.board.wait(0.5)
    thread.join()
    if failure:
        exc = failure[0]
        if isinstance(exc, StatorError):
            fail(str(exc))
        raise exc
    return result[0]
