"""The coordinator: the public ``Worker``, whose ``run`` claims batches, hands rows to the
handler executor, collects their results for the writer, and sleeps in between.

It sleeps until the earliest of: a row falling due, a running handler's deadline, a batch of
results to write, housekeeping, or a wake-up (LISTEN/NOTIFY on PostgreSQL, a
``PRAGMA data_version`` change on SQLite, an in-process commit).  Nothing spins.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from .. import _backoff, _local_wakeups, _metrics
from .._board import Board, ThreadState
from .._clock import Clock
from .._db_errors import database_errors
from .._execute import Executor
from .._failure_log import FailureLog
from .._incurable import Broken, is_incurable
from .._store import TrackedModel
from .._store.interface import Driver
from ._db_steps import DatabaseSteps
from ._handlers import HandlerPool
from ._housekeeping import HEARTBEAT_EVERY, Housekeeper
from ._listener import Listener
from ._state import TOO_MANY_HUNG, RunSummary, Signals, Tally, WorkerOptions
from ._writer import FLUSH_DELAY, Writer

log = logging.getLogger("stator.worker")

MAX_SLEEP = 30.0
# Rows due that a claim passed by (locked by another session) are looked at again after this
# back-off, doubling per empty claim: a lock held for minutes costs a claim a second, not 100.
PASSED_BY_FIRST = 0.01
PASSED_BY_CAP = 1.0
COORDINATOR = "stator-coordinator"  # its name on the board


class Worker:
    """One worker: ``run`` it in a thread of yours, ``stop`` it from any other.  The parts
    it owns talk to it through narrow interfaces: the handler pool (``dispatch``,
    ``finished``, ``tend``), the writer (``add``, ``flush``, ``collect_written``), the
    listener (which calls ``wake``) and the housekeeper (``tick``, ``final``)."""

    def __init__(
        self, store: Driver, clock: Clock, tracked: Sequence[TrackedModel], options: WorkerOptions
    ) -> None:
        self.store = store
        self.clock = clock
        self.tracked = list(tracked)
        self.options = options
        self.id = options.worker_id or f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.executor = Executor(store, clock, self.id)
        self.board = Board()
        self._signals = Signals()
        self._stop_reason = ""  # written by the first stop(), before the stop event is set
        self._tally = Tally([t.name for t in self.tracked], clock.now())
        self._handlers = HandlerPool(
            self.executor, clock, self.board, self._signals, options, store.thread_done,
            with_loop=any(
                s.handler_is_async for t in self.tracked for s in t.graph.states.values()
            ),
        )
        self._writer = Writer(
            store, self.board, self._signals, self._tally, self.tracked, options, self.id,
            handlers_idle=lambda: self._handlers.queued == 0 and not self._in_flight(),
        )
        self._listener = Listener(
            store, self._signals, self.wake, {t.name for t in self.tracked},
            options.listen_url, self.id,
        )
        self._housekeeper = Housekeeper(
            store, clock, self.board, self._tally, self.tracked, options, self.id,
            self._healthy, self._listener.write_unseen,
        )
        # The coordinator's own state.  Its database steps run on the stator-db-calls thread
        # while it waits for them (``_guarded``), so they count as the coordinator's too.
        self._maybe_due = True  # set by any thread (wake), cleared by the coordinator only
        self._next_due: datetime | None = None
        self._passed_by = 0  # consecutive empty claims with rows due (held by other sessions)
        self._look_again_at = 0.0  # monotonic: claim rows passed by again from then on
        self._rr = 0
        self._handed_out = 0  # rows claimed for their handlers so far (for max_tasks)
        self._failures = FailureLog()
        self._broken = Broken()
        self._db = DatabaseSteps(
            store.thread_done, options.until_idle, self._broken, self._meanwhile,
            self._deadline_wait,
        )
        self._run_until: float | None = None  # monotonic end of run_for
        # The lease budget of ``_target_backlog`` (asked on every turn of the loop): graphs
        # do not change while a worker runs.
        self._shortest_timeout = min(
            (s.timeout for t in self.tracked for s in t.graph.states.values()), default=0.0)

    # -- public ----------------------------------------------------------------------------

    def stop(self, reason: str = "stopped") -> None:
        """Ask for a graceful stop: claim nothing more, hand back unstarted rows, finish."""
        if not self._signals.stop.is_set():
            self._stop_reason = reason
            self._signals.stop.set()
        self._listener.interrupt()
        self._signals.kick.set()

    def wake(self) -> None:
        self._maybe_due = True
        self._signals.kick.set()

    def run(self) -> RunSummary:
        """Run in the calling thread until stopped, idle (``until_idle``) or out of time."""
        began = time.monotonic()
        if self.options.run_for is not None:
            self._run_until = began + self.options.run_for
        self._writer.start()
        self._handlers.start()
        wake_key = self.store.wake_key
        _local_wakeups.subscribe(wake_key, self.wake)
        self._listener.start()
        try:
            self._coordinate(began)
        finally:
            _local_wakeups.unsubscribe(wake_key, self.wake)
            self._db.close()
            self._signals.stop.set()
            self._writer.stop()
            self._handlers.stop()
            self._housekeeper.final()
            self._listener.join()
            self.board.report(COORDINATOR, ThreadState.STOPPED)  # wakes whoever waits on us
        return RunSummary(
            self._tally.totals, time.monotonic() - began, self._stop_reason,
            self._handlers.replaced, self._handlers.hung,
        )

    # -- the coordinator loop --------------------------------------------------------------

    def _coordinate(self, began: float) -> None:
        kick, stop, writer = self._signals.kick, self._signals.stop, self._writer
        first = True
        while True:
            kick.clear()
            self._collect()
            self._tend()
            self._collect_written()
            if not first:  # the first claim goes first: work waiting at start-up starts sooner
                self._housekeeper.tick(self._db.run)
            first = False
            if writer.pending and writer.flush_due():
                writer.flush()
            if stop.is_set():
                self._handlers.hand_back_unstarted()
                if not self._in_flight():
                    self._collect()
                    writer.flush()
                    if not writer.pending and not writer.in_flight:
                        return
            else:
                if self.options.run_for is not None and (
                    time.monotonic() - began >= self.options.run_for
                ):
                    self.stop("run-for elapsed")
                    continue
                if self._tasks_left() == 0 and self._quiet():
                    self.stop("max-tasks reached")
                    continue
                if self._maybe_due and self._room() > 0:
                    self.board.report(COORDINATOR, ThreadState.CLAIMING, notify=False)
                    if self._db.run(self._claim, "claiming"):
                        continue
                if (self.options.until_idle and self._quiet()
                        and self._db.run(self._idle, "finding due rows")):
                    self.stop("idle")
                    continue
            self.board.report(COORDINATOR, ThreadState.WAITING, notify=False)
            kick.wait(self._sleep_time())

    def _meanwhile(self) -> None:
        """What the coordinator keeps doing while a database step runs (``DatabaseSteps``)."""
        self._tend()
        self._collect_written()
        if self._writer.pending and self._writer.flush_due():
            self._writer.flush()

    def _healthy(self) -> list[TrackedModel]:
        return [t for t in self.tracked if not self._broken.is_broken(t.name)]

    def _deadline_wait(self) -> float:
        """Seconds until the nearest running handler's deadline (at most one)."""
        deadline = self._handlers.nearest_deadline()
        if deadline is None:
            return 1.0
        return min(max(deadline - time.monotonic(), 0.005), 1.0)

    # -- claiming --------------------------------------------------------------------------

    def _target_backlog(self) -> int:
        """How many unstarted rows to hold: enough to keep threads busy, few enough that they
        all start well within their lease (rows held too long would expire unstarted).  Up
        to two batches once handlers are timed: the next claim then runs while the handler
        threads still work through the rows of the last one, instead of after them."""
        conc = self.options.concurrency
        timing = self._handlers.timing
        if timing.measured < conc:
            return conc  # until handlers have been timed, claim no more than can start
        wanted = int(conc * self._shortest_timeout / max(timing.average, 1e-4))
        return max(conc, min(2 * self.options.batch_size, wanted))

    def _room(self) -> int:
        """How many rows to claim now: up to a batch, once at least half a batch fits under
        the target backlog (a claim of a few rows costs nearly what a full one does)."""
        target = self._target_backlog()
        batch = min(self.options.batch_size, target)
        room = target - self._handlers.backlog
        return min(room if room >= (batch + 1) // 2 else 0, batch, self._tasks_left())

    def _tasks_left(self) -> int:
        """How many more rows ``max_tasks`` lets this worker claim for their handlers."""
        if self.options.max_tasks is None:
            return sys.maxsize
        return max(self.options.max_tasks - self._handed_out, 0)

    def _claim(self) -> bool:
        room = self._room()
        now = self.clock.now()
        order = self.tracked[self._rr:] + self.tracked[: self._rr]
        self._rr = (self._rr + 1) % max(len(self.tracked), 1)
        got = 0
        share = max(room // max(len(order), 1), 1)
        for tracked in order:
            if self._broken.skip(tracked.name):
                continue
            try:
                rows = tracked.in_claim_order(
                    self.store.claim(tracked, now, min(share, room - got))
                )
            except database_errors() as exc:
                if not is_incurable(exc):
                    raise
                self._db.unusable(tracked.name, exc)
                continue
            self._broken.healed(tracked.name)
            _metrics.claimed(len(rows))
            states = tracked.graph.states
            self._handed_out += sum(1 for _obj, c in rows if states[c.state].handler is not None)
            self._handlers.dispatch(
                [self.executor.prepare(tracked, obj, claimed) for obj, claimed in rows]
            )
            got += len(rows)
            if got >= room:
                break
        if got:
            self._passed_by = 0
        else:
            self._maybe_due = False
            self._next_due = self.store.next_due(self._healthy())
            self._back_off_if_passed_by(now)
        return got > 0

    def _back_off_if_passed_by(self, claimed_at: datetime) -> None:
        """Rows due at the claim that it did not get are held by another session (its
        ``SELECT … FOR UPDATE``, or another worker mid-claim): look again later, later each
        time, rather than spin for as long as the lock is held.  New work still wakes us."""
        if self._next_due is None or self._next_due > claimed_at:
            self._passed_by = 0
            return
        self._passed_by += 1
        wait = _backoff.delay(self._passed_by, PASSED_BY_FIRST, PASSED_BY_CAP)
        self._look_again_at = time.monotonic() + wait

    # -- results ---------------------------------------------------------------------------

    def _collect(self) -> None:
        """Take the handlers' results: count them, log failures, pass writes to the writer."""
        period = self._tally.period
        add = self._writer.add
        for task in self._handlers.finished():
            counters = period[task.tracked.name]
            write = task.write
            if task.lost:
                counters.lost += 1
                _metrics.lease_lost()
            elif task.committed is not None:
                counters.processed += 1
                counters.transitions += task.committed.moved
                _metrics.written(self.id, task.tracked.name, task.tracked.label,
                                 (task.committed,), ())
                self._maybe_due = True  # it may have added or moved rows that are due now
            if write is not None and write.failure is not None and not task.abandoned:
                self._failures.failed(task.tracked.name, task.claimed.pk, task.claimed.state,
                                      write.attempt, write.failure)  # abandoned: logged already
            if write is not None:
                add(task.tracked.name, write)

    def _tend(self) -> None:
        """Enforce handlers' deadlines (their results are collected at once); too many hung
        handlers stop the worker (see ``HandlerPool``)."""
        self._handlers.tend()
        self._collect()
        if self._handlers.too_many_hung and not self._signals.stop.is_set():
            log.error(
                "%d handler threads hung past their deadlines (max_hung %d): claiming nothing "
                "more, finishing what runs, then stopping so that the process is restarted",
                self._handlers.hung, self.options.hung_cap, extra={"action": "too_many_hung"},
            )
            self.stop(TOO_MANY_HUNG)

    def _collect_written(self) -> None:
        if self._writer.collect_written():
            self._maybe_due = True
        if self._writer.gave_up is not None:
            raise self._writer.gave_up

    def _in_flight(self) -> bool:
        return self.board.outstanding() > 0

    def _quiet(self) -> bool:
        return (
            not self._in_flight() and not self._writer.pending
            and not self._handlers.has_finished() and not self._writer.in_flight
        )

    def _idle(self) -> bool:
        """True when nothing this worker could claim is due within the idle window (checked
        fresh): rows other sessions hold locked are theirs, not ours to wait for."""
        due = self.store.next_due(self._healthy(), claimable_at=self.clock.now())
        self._next_due = due
        window = self.clock.now() + timedelta(seconds=self.options.idle_window)
        return due is None or due > window

    def _sleep_time(self) -> float:
        waits = [MAX_SLEEP, HEARTBEAT_EVERY]
        if self._writer.pending:
            waits.append(FLUSH_DELAY)
        deadline = self._handlers.nearest_deadline()
        if deadline is not None:
            waits.append(deadline - time.monotonic())
        respawn = self._handlers.next_respawn()
        if respawn is not None:
            waits.append(respawn - time.monotonic())
        if self._run_until is not None:
            waits.append(self._run_until - time.monotonic())
        retry = self._broken.next_retry()
        if retry is not None:
            if retry > time.monotonic():
                waits.append(retry - time.monotonic())
            else:
                self._maybe_due = True  # a broken model's next try is due
        if self._db.retry_at > time.monotonic():
            waits.append(self._db.retry_at - time.monotonic())
        if self._signals.stop.is_set():
            waits.append(0.05)
        elif self._next_due is not None and not self._maybe_due:
            wait = (self._next_due - self.clock.now()).total_seconds()
            if wait <= 0:
                # Due but passed by (held by another session): look again after the back-off.
                wait = self._look_again_at - time.monotonic()
                if wait <= 0:
                    self._maybe_due = True
            waits.append(wait)
        if self.options.until_idle and self._quiet():
            waits.append(self.options.idle_window / 4)
        return max(min(waits), 0.0)


__all__ = ["COORDINATOR", "MAX_SLEEP", "Worker"]
