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
import sqlite3
import sys
import threading
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.exc import DBAPIError

from . import _policy, _wake
from ._board import Board, ThreadState
from ._clock import Clock
from ._execute import Executor, Task
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
        self.executor = Executor(store, clock)
        self.board = Board()
        self.id = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        store.worker_id = self.id
        self._kick = threading.Event()
        self._stop = threading.Event()
        self._stop_reason = ""
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
        self._by_name = {t.name: t for t in tracked}

    # -- public ----------------------------------------------------------------------------

    def stop(self, reason: str = "stopped") -> None:
        """Ask for a graceful stop: claim nothing more, hand back unstarted rows, finish."""
        if not self._stop.is_set():
            self._stop_reason = reason
            self._stop.set()
        self._kick.set()

    def wake(self) -> None:
        self._maybe_due = True
        self._kick.set()

    def run(self) -> RunSummary:
        """Run in the calling thread until stopped, idle (``until_idle``) or out of time."""
        began = time.monotonic()
        self._start_threads()
        wake_key = _wake.key_for(self.store.engine.url)
        _wake.subscribe(wake_key, self.wake)
        listener = threading.Thread(target=self._listen, name="stator-listener", daemon=True)
        listener.start()
        try:
            self._coordinate(began)
        finally:
            _wake.unsubscribe(wake_key, self.wake)
            self._stop.set()
            self._stop_threads()
            self._final_housekeeping()
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
                    if self._guarded(self._claim):
                        continue
                if self.options.until_idle and self._quiet() and self._guarded(self._idle):
                    self.stop("idle")
                    continue
            self.board.report(COORDINATOR, ThreadState.WAITING, notify=False)
            self._kick.wait(self._sleep_time())

    def _guarded(self, action: Callable[[], bool | None]) -> bool:
        """Run a database step; a transient database error is retried later, with backoff."""
        try:
            result = action()
        except DBAPIError as exc:
            if not is_transient(exc):
                raise
            self._kick.wait(self._outage.failed(exc))
            return False
        self._outage.recovered()
        return bool(result)

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
            rows = self.store.claim(tracked, now, min(share, room - got))
            for obj, claimed in rows:
                self._dispatch(self.executor.prepare(tracked, obj, claimed))
            got += len(rows)
            if got >= room:
                break
        if not got:
            self._maybe_due = False
            self._next_due = self.store.next_due(self.tracked)
        return got > 0

    def _dispatch(self, task: Task) -> None:
        self.board.hand_out()
        handler_state = task.tracked.graph.states[task.claimed.state]
        if handler_state.handler_is_async and self._loop is not None:
            with self._queued_lock:
                self._async_inflight += 1
            asyncio.run_coroutine_threadsafe(self._run_async(task), self._loop)
        else:
            with self._queued_lock:
                self._queued += 1
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
        board = self.board
        board.report(name, ThreadState.WAITING, notify=False)
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
                board.report(name, ThreadState.RUNNING, notify=False)
                self._run_one(task)
                if task.abandoned:
                    board.report(name, ThreadState.ABANDONED)
                    return  # a replacement thread took this one's place
                self._finish(task)
                task = None
                board.report(name, ThreadState.WAITING, notify=False)
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
        self._avg_duration = 0.9 * self._avg_duration + 0.1 * seconds
        if self._measured < self.options.concurrency:
            self._measured += 1

    def _finish(self, task: Task) -> None:
        self._finished.append(task)
        self.board.take_back()
        if self._queued == 0 or len(self._finished) >= self.options.batch_size // 2:
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
            elif task.committed is not None:
                counters.processed += 1
                counters.transitions += task.committed.moved
                self._maybe_due = True  # it may have added or moved rows that are due now
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
                    lost = self.store.write_all(groups)
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
        due = self.store.next_due(self.tracked)
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
            self._guarded(self._heartbeat)
        if now - self._last_stats >= STATS_EVERY:
            self._last_stats = now
            self._guarded(self._write_stats)

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
        depth = self.store.due_depth(self.tracked, now)
        rows = []
        for name, counters in self._period.items():
            count, lag = depth.get(name, (0, 0.0))
            rows.append({
                "worker_id": self.id, "model": name, "period_start": self._period_start,
                "period_end": now, "queue_depth": count, "lag_seconds": lag, **vars(counters),
            })
        self.store.record_stats(rows, now - KEEP_HISTORY)
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
        if self.store.dialect.name == "postgresql":
            self._listen_postgres()
        else:
            self._poll_sqlite()

    def _listen_postgres(self) -> None:
        tables = set(self._by_name)
        outage = Outage("wake-up listener", first_delay=0.5)
        while not self._stop.is_set():
            try:
                conn = _listen_connection(self.store.engine)
                conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                outage.recovered()
                self.wake()  # anything committed while we were not listening
                while not self._stop.is_set():
                    for note in conn.notifies(timeout=1.0):
                        if note.payload in tables:
                            self.wake()
                conn.close()
            except Exception as exc:
                self._stop.wait(outage.failed(exc))

    def _poll_sqlite(self) -> None:
        path = self.store.engine.url.database
        if not path or path == ":memory:":
            return
        conn = sqlite3.connect(path, check_same_thread=False)
        try:
            last = None
            while not self._stop.wait(SQLITE_POLL):
                try:
                    (version,) = conn.execute("PRAGMA data_version").fetchone()
                except sqlite3.Error:
                    continue
                if last is not None and version != last:
                    self.wake()
                last = version
        finally:
            conn.close()


def _listen_connection(engine: Any) -> Any:
    """A connection of its own (outside the pool) for LISTEN, in autocommit mode."""
    import psycopg

    args, kwargs = engine.dialect.create_connect_args(engine.url)
    return psycopg.connect(*args, **kwargs, autocommit=True)


__all__ = ["RunSummary", "Worker", "WorkerOptions"]
