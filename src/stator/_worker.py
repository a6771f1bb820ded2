"""A worker process's runtime: one coordinator, handler threads, an event loop, a listener.

The coordinator claims batches, hands rows to handler threads (sync handlers) or to the
event loop (async handlers), enforces deadlines, and writes results back in batches.  It
sleeps until the earliest of: a row falling due, a running handler's deadline, a batch of
results to write, housekeeping, or a wake-up (LISTEN/NOTIFY on PostgreSQL, a
``PRAGMA data_version`` change on SQLite, an in-process commit).  Nothing spins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import select
import sqlite3
import sys
import threading
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.exc import DBAPIError

from . import _metrics, _policy, _wake
from ._board import Board, ThreadState
from ._broken import Broken, DatabaseUnusable, first_line, is_incurable
from ._clock import Clock
from ._execute import Executor, Task
from ._failure_log import FailureLog
from ._outage import Outage, is_transient
from ._policy import Write
from ._store import NOTIFY_CHANNEL, Store, TrackedModel

log = logging.getLogger("stator.worker")

FLUSH_DELAY = 0.02  # seconds a finished result may wait to share a write with others
HEARTBEAT_EVERY = 5.0
STATS_EVERY = 30.0
KEEP_HISTORY = timedelta(days=1)
SQLITE_POLL = 0.1  # seconds between cross-process change checks on SQLite (one PRAGMA each)
MAX_SLEEP = 30.0
POLL_WITHOUT_NOTIFY = 1.0  # seconds between looks for new work when notifications fail
PROBE_TIMEOUT = 10.0  # seconds the listener waits for its own test notification
LISTENER_JOIN = 3.0  # seconds run() waits for the listener to end (stop() interrupts it)
LISTEN_WAIT = 1.0  # seconds the listener waits for notifications before looking around
DEATH_WINDOW = 60.0  # seconds over which handler-thread deaths slow down their replacement
COORDINATOR, WRITER = "stator-coordinator", "stator-writer"  # names on the board


WriteBatch = list[tuple[TrackedModel, list[Write]]]


@dataclass
class WorkerOptions:
    concurrency: int = 4
    batch_size: int = 100
    until_idle: bool = False
    idle_window: float = 1.0
    run_for: float | None = None
    liveness_file: Path | None = None
    listen_url: str | None = None  # a direct connection for LISTEN (behind a pooler)


@dataclass
class ModelCounters:
    processed: int = 0
    transitions: int = 0
    errors: int = 0
    timeouts: int = 0
    deleted: int = 0
    lost: int = 0

    def add(self, other: ModelCounters) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class RunSummary:
    """What one ``run`` did, for the caller and the CLI's closing line."""

    counters: dict[str, ModelCounters] = field(default_factory=dict)
    seconds: float = 0.0
    reason: str = ""
    threads_replaced: int = 0

    @property
    def processed(self) -> int:
        return sum(c.processed for c in self.counters.values())

    @property
    def transitions(self) -> int:
        return sum(c.transitions for c in self.counters.values())


class Worker:
    def __init__(
        self, store: Store, clock: Clock, tracked: Sequence[TrackedModel], options: WorkerOptions
    ) -> None:
        self.store = store
        self.clock = clock
        self.tracked = list(tracked)
        self.options = options
        self.id = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.executor = Executor(store, clock, self.id)
        self.board = Board()
        self._kick = threading.Event()
        self._stop = threading.Event()
        self._stop_reason = ""
        # Set once this worker's own test notification came back: notifications reach the
        # listener, so a reconnected listener (after a cut, a server restart) needs no new probe.
        self._notify_proven = False
        self._queue: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        self._queued = 0  # tasks in _queue not yet taken by a thread
        self._queued_lock = threading.Lock()
        self._running: set[Task] = set()
        self._running_lock = threading.Lock()
        self._finished: deque[Task] = deque()
        self._pending: dict[str, list[Write]] = {}
        self._pending_since: float | None = None
        self._to_write: queue.SimpleQueue[WriteBatch | None] = queue.SimpleQueue()
        self._written: deque[tuple[WriteBatch, dict[str, set[Any]]]] = deque()
        self._writes_in_flight = 0  # batches handed to the writer thread, not yet reported
        self._maybe_due = True
        self._next_due: datetime | None = None
        self._rr = 0
        self._avg_duration = 0.01
        self._measured = 0  # handler runs timed so far (capped; only "enough yet?" matters)
        self._threads: dict[str, threading.Thread] = {}
        self._thread_seq = 0
        self._replaced = 0
        self._deaths: deque[float] = deque()  # when handler threads died (the last minute)
        self._respawns: list[float] = []  # when to replace threads that died
        self._loop: asyncio.AbstractEventLoop | None = None
        self._async_slots: asyncio.Semaphore | None = None
        self._async_inflight = 0
        self._counters: dict[str, ModelCounters] = {t.name: ModelCounters() for t in tracked}
        self._period: dict[str, ModelCounters] = {t.name: ModelCounters() for t in tracked}
        self._period_start = clock.now()
        self._started = clock.now()
        self._last_heartbeat = 0.0
        self._last_stats = time.monotonic()
        self._outage = Outage("worker")
        self._failures = FailureLog()
        self._broken = Broken()
        self._db_retry_at = 0.0  # no database step before this (monotonic): backing off
        self._db_calls: _Calls | None = None
        self._by_name = {t.name: t for t in tracked}
        self._run_until: float | None = None  # monotonic end of run_for
        self._stop_pipe: _StopPipe | None = None  # readable once stopped (see _notes)

    # -- public ----------------------------------------------------------------------------

    def stop(self, reason: str = "stopped") -> None:
        """Ask for a graceful stop: claim nothing more, hand back unstarted rows, finish."""
        if not self._stop.is_set():
            self._stop_reason = reason
            self._stop.set()
        if self._stop_pipe is not None:
            self._stop_pipe.set()
        self._kick.set()

    def wake(self) -> None:
        self._maybe_due = True
        self._kick.set()

    def run(self) -> RunSummary:
        """Run in the calling thread until stopped, idle (``until_idle``) or out of time."""
        began = time.monotonic()
        if self.options.run_for is not None:
            self._run_until = began + self.options.run_for
        self._stop_pipe = _StopPipe()
        if self._stop.is_set():
            self._stop_pipe.set()
        self._start_threads()
        wake_key = self.store.wake_key
        _wake.subscribe(wake_key, self.wake)
        listener = threading.Thread(target=self._listen, name="stator-listener", daemon=True)
        listener.start()
        try:
            self._coordinate(began)
        finally:
            _wake.unsubscribe(wake_key, self.wake)
            if self._db_calls is not None:
                self._db_calls.close()
            self._stop.set()
            self._stop_threads()
            self._final_housekeeping()
            # The listener notices the stop within a second; waiting for it means no thread
            # of this worker touches the store (its pool, its connections) once run returns.
            listener.join(LISTENER_JOIN)
            if not listener.is_alive():
                self._stop_pipe.close()
            self.board.report(COORDINATOR, ThreadState.STOPPED)  # wakes whoever waits on us
        return RunSummary(
            self._counters, time.monotonic() - began, self._stop_reason, self._replaced
        )

    # -- the coordinator loop --------------------------------------------------------------

    def _coordinate(self, began: float) -> None:
        while True:
            self._kick.clear()
            self._collect()
            self._enforce_deadlines()
            self._collect_written()
            self._housekeeping()
            if self._pending and self._flush_due():
                self._flush()
            if self._stop.is_set():
                self._hand_back_unstarted()
                if not self._in_flight():
                    self._collect()
                    self._flush()
                    if not self._pending and not self._writes_in_flight:
                        return
            else:
                if self.options.run_for is not None and (
                    time.monotonic() - began >= self.options.run_for
                ):
                    self.stop("run-for elapsed")
                    continue
                if self._maybe_due and self._room() > 0:
                    self.board.report(COORDINATOR, ThreadState.CLAIMING, notify=False)
                    if self._guarded(self._claim, "claiming"):
                        continue
                if (self.options.until_idle and self._quiet()
                        and self._guarded(self._idle, "finding due rows")):
                    self.stop("idle")
                    continue
            self.board.report(COORDINATOR, ThreadState.WAITING, notify=False)
            self._kick.wait(self._sleep_time())

    def _guarded(self, action: Callable[[], bool | None], what: str = "the database") -> bool:
        """Run a database step; a transient database error is retried later, with backoff;
        one that waiting cannot cure marks ``what`` broken (or ends an until-idle run).

        The step runs on a thread of its own while this one goes on enforcing deadlines and
        passing results to the writer: a call can hang for as long as the network takes to
        be declared dead (the client settings in ``_dialects``), and the handlers' deadlines
        must not wait for it.  Backing off does not sleep here either, for the same reason.
        """
        if time.monotonic() < self._db_retry_at:
            return False
        if self._db_calls is None:
            self._db_calls = _Calls(self.store.thread_done)
        future = self._db_calls.submit(action)
        while not wait([future], timeout=self._deadline_wait()).done:
            self._enforce_deadlines()
            self._collect_written()
            if self._pending and self._flush_due():
                self._flush()
        try:
            result = future.result()
        except DBAPIError as exc:
            _metrics.db_error()
            if is_incurable(exc):
                self._unusable(what, exc)
                return False
            if not is_transient(exc):
                raise
            self._db_retry_at = time.monotonic() + self._outage.failed(exc)
            return False
        self._outage.recovered()
        self._broken.healed(what)
        return bool(result)

    def _unusable(self, what: str, exc: BaseException) -> None:
        if self.options.until_idle:
            raise DatabaseUnusable(
                f"{what}: {first_line(exc)} (waiting will not fix this: check the database's "
                "permissions, that it is writable, and that `stator migrate` was run)"
            ) from exc
        self._broken.mark(what, exc)

    def _healthy(self) -> list[TrackedModel]:
        return [t for t in self.tracked if not self._broken.is_broken(t.name)]

    def _deadline_wait(self) -> float:
        """Seconds until the nearest running handler's deadline (at most one)."""
        with self._running_lock:
            deadlines = [t.deadline for t in self._running if t.deadline is not None]
        if not deadlines:
            return 1.0
        return min(max(min(deadlines) - time.monotonic(), 0.005), 1.0)

    # -- claiming --------------------------------------------------------------------------

    def _target_backlog(self) -> int:
        """How many unstarted rows to hold: enough to keep threads busy, few enough that they
        all start well within their lease (rows held too long would expire unstarted)."""
        conc = self.options.concurrency
        if self._measured < conc:
            return conc  # until handlers have been timed, claim no more than can start
        budget = min(s.timeout for t in self.tracked for s in t.graph.states.values())
        wanted = int(conc * budget / max(self._avg_duration, 1e-4))
        return max(conc, min(self.options.batch_size, wanted))

    def _room(self) -> int:
        backlog = self._queued + self._async_inflight
        target = self._target_backlog()
        return target - backlog if backlog <= target // 2 else 0

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
                rows = self.store.claim(tracked, now, min(share, room - got))
            except DBAPIError as exc:
                if not is_incurable(exc):
                    raise
                self._unusable(tracked.name, exc)
                continue
            self._broken.healed(tracked.name)
            _metrics.claimed(len(rows))
            self._dispatch([self.executor.prepare(tracked, obj, claimed) for obj, claimed in rows])
            got += len(rows)
            if got >= room:
                break
        if not got:
            self._maybe_due = False
            self._next_due = self.store.next_due(self._healthy())
        return got > 0

    def _dispatch(self, tasks: list[Task]) -> None:
        """Hand a claimed batch out: counted once for the batch (not a lock per row), then
        each row to the event loop (async handlers) or the handler threads' queue."""
        if not tasks:
            return
        self.board.hand_out(len(tasks))
        states = tasks[0].tracked.graph.states
        sync = [t for t in tasks
                if not (states[t.claimed.state].handler_is_async and self._loop is not None)]
        with self._queued_lock:
            self._queued += len(sync)
            self._async_inflight += len(tasks) - len(sync)
        for task in tasks:
            if states[task.claimed.state].handler_is_async and self._loop is not None:
                asyncio.run_coroutine_threadsafe(self._run_async(task), self._loop)
        for task in sync:
            self._queue.put(task)

    # -- handler threads -------------------------------------------------------------------

    def _start_threads(self) -> None:
        writer = threading.Thread(target=self._writer_main, name="stator-writer", daemon=True)
        writer.start()
        self._writer = writer
        for _ in range(self.options.concurrency):
            self._spawn_thread()
        if any(s.handler_is_async for t in self.tracked for s in t.graph.states.values()):
            ready = threading.Event()
            thread = threading.Thread(
                target=self._loop_main, args=(ready,), name="stator-loop", daemon=True
            )
            thread.start()
            ready.wait()

    def _spawn_thread(self) -> None:
        self._thread_seq += 1
        name = f"stator-handler-{self._thread_seq}"
        thread = threading.Thread(target=self._thread_main, args=(name,), name=name, daemon=True)
        self._threads[name] = thread
        self.board.report(name, ThreadState.IDLE)
        thread.start()

    def _thread_main(self, name: str) -> None:
        try:
            self._handle_tasks(name)
        finally:
            self.store.thread_done()  # e.g. close this thread's Django connection

    def _handle_tasks(self, name: str) -> None:
        board = self.board
        board.report(name, ThreadState.WAITING, notify=False)
        running = False
        task: Task | None = None
        try:
            while True:
                task = self._queue.get()
                if task is None:
                    board.report(name, ThreadState.STOPPED)
                    return
                with self._queued_lock:
                    self._queued -= 1
                if self._stop.is_set():
                    task.write = _policy.release(task.claimed, self.clock.now())
                    self._finish(task)
                    task = None
                    continue
                if not running:  # routine states are reported on change only, not per row
                    board.report(name, ThreadState.RUNNING, notify=False)
                    running = True
                self._run_one(task)
                if task.abandoned:
                    board.report(name, ThreadState.ABANDONED)
                    return  # a replacement thread took this one's place
                self._finish(task)
                task = None
                if self._queue.empty():
                    board.report(name, ThreadState.WAITING, notify=False)
                    running = False
        except BaseException:
            # The thread ends here; the coordinator sees DIED and starts a replacement.
            log.exception("handler thread %s died", name, extra={"action": "thread_died"})
            if task is not None and not task.abandoned:
                self._finish(task)
            board.report(name, ThreadState.DIED)
            self._kick.set()

    def _run_one(self, task: Task) -> None:
        task.thread = threading.current_thread().name
        started = time.monotonic()
        task.started = started
        task.deadline = started + task.timeout
        with self._running_lock:
            self._running.add(task)
        try:
            if self.executor.before(task):
                self.executor.run_sync(task)
            else:
                task.finish()
        finally:
            with self._running_lock:
                self._running.discard(task)
            self._note_duration(time.monotonic() - started)

    def _note_duration(self, seconds: float) -> None:
        _metrics.handler_seconds(seconds)
        self._avg_duration = 0.9 * self._avg_duration + 0.1 * seconds
        if self._measured < self.options.concurrency:
            self._measured += 1

    def _finish(self, task: Task) -> None:
        self._finished.append(task)
        self.board.take_back()
        if (self._queued == 0 or len(self._finished) >= self.options.batch_size // 2) and (
            not self._kick.is_set()  # setting a set Event still takes its lock and notifies
        ):
            # Safe to skip: the append above comes before this check, the coordinator
            # clears the kick before it collects, so it sees this task either way.
            self._kick.set()

    # -- the event loop for async handlers --------------------------------------------------

    def _loop_main(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._async_slots = asyncio.Semaphore(self.options.concurrency)
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _run_async(self, task: Task) -> None:
        assert self._async_slots is not None
        try:
            async with self._async_slots:
                if self._stop.is_set():
                    task.write = _policy.release(task.claimed, self.clock.now())
                    return
                started = time.monotonic()
                task.started = started
                task.deadline = started + task.timeout
                if self.executor.before(task):
                    await self.executor.run_async(task)
                else:
                    task.finish()
                self._note_duration(time.monotonic() - started)
        except Exception:
            log.exception("async handler wrapper failed", extra={"action": "async_failed"})
            if task.write is None and task.committed is None:
                task.write = _policy.release(task.claimed, self.clock.now())
        finally:
            with self._queued_lock:
                self._async_inflight -= 1
            self._finish(task)

    # -- results, deadlines, writes --------------------------------------------------------

    def _collect(self) -> None:
        while self._finished:
            task = self._finished.popleft()
            counters = self._period[task.tracked.name]
            write = task.write
            if task.lost:
                counters.lost += 1
                _metrics.lease_lost()
            elif task.committed is not None:
                counters.processed += 1
                counters.transitions += task.committed.moved
                _metrics.written(self.id, task.tracked.name, (task.committed,), ())
                self._maybe_due = True  # it may have added or moved rows that are due now
            if write is not None and write.failure is not None and not task.abandoned:
                self._failures.failed(task.tracked.name, task.claimed.pk, task.claimed.state,
                                      write.attempt, write.failure)  # abandoned: logged already
            if write is not None:
                self._pending.setdefault(task.tracked.name, []).append(write)
                if self._pending_since is None:
                    self._pending_since = time.monotonic()

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        with self._running_lock:
            overdue = [t for t in self._running if t.deadline is not None and t.deadline <= now]
        for task in overdue:
            if task.abandon():
                with self._running_lock:
                    self._running.discard(task)
                log.warning(
                    "%s %s: handler for state %s passed its %gs deadline; abandoned",
                    task.tracked.name, task.claimed.pk, task.claimed.state, task.timeout,
                    extra={"action": "deadline"},
                )
                task.write = self.executor.timed_out(task, self._stack_of(task.thread))
                self._threads.pop(task.thread, None)  # it exits by itself if it ever returns
                self._finished.append(task)
                self.board.take_back()
                self._replaced += 1
                self._spawn_thread()
        self._collect()
        for name, thread in list(self._threads.items()):
            if not thread.is_alive() and self.board.state_of(name) == ThreadState.DIED:
                self.board.forget(name)
                del self._threads[name]
                if not self._stop.is_set():
                    # Threads that keep dying are replaced more and more slowly, but the
                    # coordinator never sleeps for it: it must go on flushing results and
                    # enforcing deadlines, or the leases of rows already done run out.
                    self._deaths.append(now)
                    while now - self._deaths[0] > DEATH_WINDOW:
                        self._deaths.popleft()
                    delay = min(0.1 * (len(self._deaths) - 1), 5.0)
                    self._respawns.append(now + delay)
        due = [t for t in self._respawns if t <= time.monotonic()]
        for t in due:
            self._respawns.remove(t)
            if not self._stop.is_set():
                self._replaced += 1
                self._spawn_thread()

    def _stack_of(self, name: str) -> str:
        """Where a handler thread is right now (for the failure record of a hung handler)."""
        thread = self._threads.get(name)
        frame = sys._current_frames().get(thread.ident) if thread and thread.ident else None
        if frame is None:
            return ""
        return (
            "Stack of the handler's thread at its deadline (most recent call last):\n"
            + "".join(traceback.format_stack(frame))
        )

    def _flush_due(self) -> bool:
        if self._stop.is_set() or self._pending_since is None:
            return True
        count = sum(len(w) for w in self._pending.values())
        if self._writes_in_flight and count < self.options.batch_size:
            return False  # the writer is busy: let results gather into a bigger batch
        idle = self._queued == 0 and not self._in_flight()
        return (
            count >= self.options.batch_size
            or idle
            or time.monotonic() - self._pending_since >= FLUSH_DELAY
        )

    def _flush(self) -> None:
        """Hand the gathered results to the writer thread, so the coordinator can claim the
        next batch while this one is written (the two overlap on separate connections)."""
        if not self._pending:
            return
        groups = []
        for name, writes in self._pending.items():
            # A row claimed again (its lease ran out) while an older result of it still waited
            # here: the older result is stale, the fence would refuse it.  Leave it out, or
            # its failure would be recorded alongside the newer write that does apply.
            newest: dict[Any, Write] = {}
            for w in writes:
                kept = newest.get(w.pk)
                if kept is None or w.fence > kept.fence:
                    newest[w.pk] = w
            self._period[name].lost += len(writes) - len(newest)
            groups.append((self._by_name[name], list(newest.values())))
        self._pending = {}
        self._pending_since = None
        self._writes_in_flight += 1
        self._to_write.put(groups)

    def _writer_main(self) -> None:
        try:
            self._write_batches()
        finally:
            self.store.thread_done()

    def _write_batches(self) -> None:
        outage = Outage("writer")
        pause = threading.Event()
        while True:
            self.board.report(WRITER, ThreadState.WAITING, notify=False)
            groups = self._to_write.get()
            if groups is None:
                self.board.report(WRITER, ThreadState.STOPPED, notify=False)
                return
            self.board.report(WRITER, ThreadState.WRITING, notify=False)
            while True:
                try:
                    lost = self.store.write_all(groups, self.id)
                except DBAPIError as exc:
                    if is_transient(exc):
                        pause.wait(outage.failed(exc))  # results are kept, not lost
                        continue
                    log.exception("writing results failed; the rows run again after their "
                                  "lease", extra={"action": "write_failed"})
                    lost = {t.name: {w.pk for w in ws} for t, ws in groups}
                outage.recovered()
                break
            self._written.append((groups, lost))
            self._kick.set()

    def _collect_written(self) -> None:
        while self._written:
            groups, lost = self._written.popleft()
            self._writes_in_flight -= 1
            self._count_written(groups, lost)

    def _count_written(self, groups: WriteBatch, lost: dict[str, set[Any]]) -> None:
        moved_any = False
        for tracked, writes in groups:
            counters = self._period[tracked.name]
            _metrics.written(self.id, tracked.name, writes, lost.get(tracked.name, ()))
            for w in writes:
                if w.pk in lost.get(tracked.name, set()):
                    counters.lost += 1
                    continue
                counters.processed += 1
                counters.deleted += w.delete
                counters.transitions += w.moved
                moved_any = moved_any or w.moved or w.state_next is not None
                if w.failure is not None:
                    if w.failure.kind == "timeout":
                        counters.timeouts += 1
                    else:
                        counters.errors += 1
        if moved_any:
            self._maybe_due = True

    def _hand_back_unstarted(self) -> None:
        while True:
            try:
                task = self._queue.get_nowait()
            except queue.Empty:
                return
            if task is None:
                continue
            with self._queued_lock:
                self._queued -= 1
            task.write = _policy.release(task.claimed, self.clock.now())
            self._finish(task)

    def _in_flight(self) -> bool:
        return self.board.outstanding() > 0

    def _quiet(self) -> bool:
        return (
            not self._in_flight() and not self._pending and not self._finished
            and not self._writes_in_flight
        )

    def _idle(self) -> bool:
        """True when nothing is due within the idle window (checked fresh)."""
        due = self.store.next_due(self._healthy())
        self._next_due = due
        window = self.clock.now() + timedelta(seconds=self.options.idle_window)
        return due is None or due > window

    def _sleep_time(self) -> float:
        waits = [MAX_SLEEP, HEARTBEAT_EVERY]
        if self._pending:
            waits.append(FLUSH_DELAY)
        with self._running_lock:
            deadlines = [t.deadline for t in self._running if t.deadline is not None]
        if deadlines:
            waits.append(min(deadlines) - time.monotonic())
        if self._respawns:
            waits.append(min(self._respawns) - time.monotonic())
        if self._run_until is not None:
            waits.append(self._run_until - time.monotonic())
        retry = self._broken.next_retry()
        if retry is not None:
            if retry > time.monotonic():
                waits.append(retry - time.monotonic())
            else:
                self._maybe_due = True  # a broken model's next try is due
        if self._db_retry_at > time.monotonic():
            waits.append(self._db_retry_at - time.monotonic())
        if self._stop.is_set():
            waits.append(0.05)
        elif self._next_due is not None and not self._maybe_due:
            wait = (self._next_due - self.clock.now()).total_seconds()
            if wait <= 0:
                # Due but not claimable just now (another worker is mid-claim): look again
                # shortly rather than spinning.
                self._maybe_due = True
                wait = 0.01
            waits.append(wait)
        if self.options.until_idle and self._quiet():
            waits.append(self.options.idle_window / 4)
        return max(min(waits), 0.0)

    # -- housekeeping ----------------------------------------------------------------------

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if now - self._last_heartbeat >= HEARTBEAT_EVERY:
            self._last_heartbeat = now
            self._guarded(self._heartbeat, "the workers table")
        if now - self._last_stats >= STATS_EVERY:
            self._last_stats = now
            self._guarded(self._write_stats, "the stats table")

    def _heartbeat(self) -> bool:
        self.store.heartbeat(
            self.id, self._started, self.clock.now(), self.options.concurrency,
            [t.name for t in self.tracked], self.board.snapshot(), os.getpid(),
        )
        if self.options.liveness_file is not None:
            self.options.liveness_file.touch()
        return True

    def _write_stats(self) -> bool:
        now = self.clock.now()
        depth = self.store.due_depth(self._healthy(), now)
        rows = []
        for name, counters in self._period.items():
            count, lag = depth.get(name, (0, 0.0))
            rows.append({
                "worker_id": self.id, "model": name, "period_start": self._period_start,
                "period_end": now, "queue_depth": count, "lag_seconds": lag, **vars(counters),
            })
        self.store.record_stats(rows, now - KEEP_HISTORY, _metrics.drain_edges(self.id, now))
        for name, counters in self._period.items():
            self._counters[name].add(counters)
        self._period = {t.name: ModelCounters() for t in self.tracked}
        self._period_start = now
        return True

    def _final_housekeeping(self) -> None:
        with contextlib.suppress(DBAPIError):
            self._write_stats()
        with contextlib.suppress(DBAPIError):
            self.store.forget_worker(self.id)

    def _stop_threads(self) -> None:
        self._to_write.put(None)
        self._writer.join(timeout=5.0)
        for _ in self._threads:
            self._queue.put(None)
        for thread in list(self._threads.values()):
            thread.join(timeout=1.0)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    # -- wake-ups from other processes -----------------------------------------------------

    def _listen(self) -> None:
        """Keep a wake-up listener running.  One that dies (whatever the reason) has closed
        what it opened, is said so at WARNING and restarted with backoff; meanwhile the
        coordinator looks for due rows at each retry instead (polling)."""
        try:
            self._keep_listening()
        finally:
            self.store.thread_done()  # the probe's notification used this thread's connection

    def _keep_listening(self) -> None:
        outage = Outage("wake-up listener", first_delay=0.5)
        while not self._stop.is_set():
            try:
                if self.store.dialect.name == "postgresql":
                    self._listen_postgres(outage)
                else:
                    self._poll_sqlite()
                return
            except Exception as exc:
                log.warning("wake-up listener stopped (%s: %s); restarting it with backoff, "
                            "polling for due rows meanwhile", type(exc).__name__, exc,
                            extra={"action": "listener_died"})
                self._stop.wait(outage.failed(exc))
                self.wake()  # poll: anything committed while nobody listened

    def _listen_postgres(self, outage: Outage) -> None:
        tables = set(self._by_name)
        while not self._stop.is_set():
            conn = self.store.listen_connection(self.options.listen_url)
            try:
                conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                outage.recovered()
                self.wake()  # anything committed while we were not listening
                if not self._notify_proven:
                    self._probe(conn, tables)
                while not self._stop.is_set():
                    for note in self._notes(conn, LISTEN_WAIT):
                        if note.payload in tables:
                            self.wake()
            finally:
                with contextlib.suppress(Exception):
                    conn.close()

    def _notes(self, conn: Any, timeout: float) -> list[Any]:
        """The notifications that arrive within ``timeout``; a stop cuts the wait short, so
        a stopping worker does not wait out the listener's timeout."""
        waits = [conn.fileno()]
        if self._stop_pipe is not None:
            waits.append(self._stop_pipe.fileno())
        select.select(waits, [], [], timeout)
        return list(conn.notifies(timeout=0))

    def _probe(self, conn: Any, tables: set[str]) -> None:
        """Send a notification and wait for it, patiently: through a transaction-pooling
        PgBouncer, LISTEN holds for one transaction only and notifications never arrive, but
        on a loaded machine or a slow link they may only be late.  Past PROBE_TIMEOUT the
        worker says so once and polls for new work, while still listening: should the
        notification arrive after all, it goes back to waking on notifications alone."""
        token = f"probe-{self.id}"
        self.store.send_notification(token)
        started = time.monotonic()
        polling = False
        while not self._stop.is_set():
            for note in self._notes(conn, POLL_WITHOUT_NOTIFY):
                if note.payload == token:
                    self._notify_proven = True
                    if polling:
                        log.warning(
                            "wake-up listener: notifications arrive after all (%.0fs late); "
                            "no longer polling", time.monotonic() - started,
                            extra={"action": "listen_notified"},
                        )
                    return
                if note.payload in tables:
                    self.wake()
            if not polling and time.monotonic() - started >= PROBE_TIMEOUT:
                polling = True
                log.warning(
                    "wake-up listener: notifications do not arrive over this connection (a "
                    "transaction-pooling PgBouncer in between?); looking for new work every "
                    "%gs instead; give a direct connection with listen_url / --listen-url",
                    POLL_WITHOUT_NOTIFY, extra={"action": "listen_polling"},
                )
            if polling:
                self.wake()

    def _poll_sqlite(self) -> None:
        path = self.store.sqlite_path()
        if not path or path == ":memory:":
            return
        conn = sqlite3.connect(path, check_same_thread=False, uri=path.startswith("file:"))
        try:
            last = None
            while not self._stop.wait(SQLITE_POLL):
                (version,) = conn.execute("PRAGMA data_version").fetchone()
                if last is not None and version != last:
                    self.wake()
                last = version
        finally:
            conn.close()


class _StopPipe:
    """A pipe that becomes readable on stop: the listener's waits include it."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        self._closed = False
        # Held while writing or closing: a write after close could land in a reused fd.
        self._lock = threading.Lock()

    def fileno(self) -> int:
        return self._read

    def set(self) -> None:
        with self._lock:
            if not self._closed:
                with contextlib.suppress(OSError):  # full: it is readable already
                    os.set_blocking(self._write, False)
                    os.write(self._write, b".")

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._read)
                os.close(self._write)


class _Calls:
    """A daemon thread running the coordinator's database calls one at a time; ``done`` runs
    in it as it ends (the store's per-thread cleanup)."""

    def __init__(self, done: Callable[[], None]) -> None:
        self._done = done
        self._calls: queue.SimpleQueue[
            tuple[Callable[[], Any], Future[Any]] | None
        ] = queue.SimpleQueue()
        threading.Thread(target=self._main, name="stator-db-calls", daemon=True).start()

    def submit(self, action: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self._calls.put((action, future))
        return future

    def close(self) -> None:
        self._calls.put(None)

    def _main(self) -> None:
        try:
            while (call := self._calls.get()) is not None:
                action, future = call
                try:
                    future.set_result(action())
                except BaseException as exc:
                    future.set_exception(exc)
        finally:
            self._done()


__all__ = ["RunSummary", "Worker", "WorkerOptions"]
