"""The handler executor: handler threads fed from one queue (sync handlers), an event loop
on a thread of its own (async handlers), deadlines, and the replacement of threads that hang
past a deadline or die.

A thread hung past its deadline cannot be stopped from outside (Python has no way to, and a
Django connection can only be closed by its own thread), so it is abandoned and keeps its
thread and connection until its handler returns.  At most ``max_hung`` such threads are
replaced; one more and the pool replaces nothing and says ``too_many_hung``, so the worker
drains and its process exits to be restarted: handler threads stay within concurrency +
``max_hung`` whatever handlers do.

The coordinator hands claimed rows in with ``dispatch`` and takes results out with
``finished``; everything else here runs on the handler threads and the event loop, except
``tend`` (deadlines, replacements), which the coordinator calls.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable

from .. import _metrics, _policy
from .._board import Board, ThreadState
from .._clock import Clock, handlers_see
from .._execute import Executor, Task, stack_of
from ._slices import Slice, Taken, next_row, slice_size, take_all
from ._state import Signals, Timing, WorkerOptions

log = logging.getLogger("stator.worker")

DEATH_WINDOW = 60.0  # seconds over which handler-thread deaths slow down their replacement


class HandlerPool:
    def __init__(
        self, executor: Executor, clock: Clock, board: Board, signals: Signals,
        options: WorkerOptions, thread_done: Callable[[], None], with_loop: bool,
    ) -> None:
        self._executor = executor
        self._clock = clock
        self._board = board
        self._signals = signals
        self._options = options
        self._thread_done = thread_done  # the store's per-thread cleanup
        self._with_loop = with_loop  # some handler is async: run an event loop for it
        self.timing = Timing(options.concurrency)  # written by handler threads, under a lock
        self._queue: queue.SimpleQueue[Slice | None] = queue.SimpleQueue()
        # Sync rows handed in (less those handed back unstarted), under _queued_lock; each
        # thread counts the rows it takes in a counter of its own, without a lock.
        self._handed_in = 0
        self._taken: list[Taken] = []  # one per thread ever started (coordinator appends)
        self._queued_lock = threading.Lock()
        # The row each handler thread runs, for ``tend`` (its deadline): written by its own
        # thread (one slot each, made by the coordinator before the thread starts).
        self._current: dict[str, Task | None] = {}
        # The slice each handler thread works through (its rest goes back to the queue when
        # the thread is abandoned or dies).  Written by the handler threads, read by ``tend``.
        self._slices: dict[str, Slice] = {}
        # Appended by handler threads, the event loop and the coordinator; taken from by the
        # coordinator alone (deque append and popleft are atomic).
        self._finished: deque[Task] = deque()
        self._threads: dict[str, threading.Thread] = {}  # coordinator thread
        # Coordinator thread: threads abandoned past a deadline whose handler still runs.
        self._hung: dict[str, threading.Thread] = {}
        self.too_many_hung = False  # coordinator thread: more hung than max_hung, not replaced
        self._thread_seq = 0  # coordinator thread
        self._replaced = 0  # coordinator thread
        # Coordinator thread: when handler threads died (the last minute), and when to
        # replace them.
        self._deaths: deque[float] = deque()
        self._respawns: list[float] = []
        self._loop: asyncio.AbstractEventLoop | None = None  # set once, before dispatching
        self._async_slots: asyncio.Semaphore | None = None  # the event loop's
        self._async_inflight = 0  # async tasks handed out, not finished (under _queued_lock)

    # -- the coordinator's side ------------------------------------------------------------

    @property
    def backlog(self) -> int:
        """Rows handed in and not started yet (async ones: not finished yet)."""
        return self.queued + self._async_inflight

    @property
    def queued(self) -> int:
        """Sync rows handed in, not taken by a thread yet.  The threads' counts are read
        first: a row handed in meanwhile counts as queued, never one taken as not."""
        taken = sum([t.n for t in self._taken])
        return self._handed_in - taken

    @property
    def replaced(self) -> int:
        """Handler threads replaced so far (hung past a deadline, or dead)."""
        return self._replaced

    @property
    def hung(self) -> int:
        """Abandoned handler threads whose handler still runs (each keeps its connection)."""
        self._hung = {name: t for name, t in self._hung.items() if t.is_alive()}
        return len(self._hung)

    def start(self) -> None:
        for _ in range(self._options.concurrency):
            self._spawn_thread()
        if self._with_loop:
            ready = threading.Event()
            threading.Thread(
                target=self._loop_main, args=(ready,), name="stator-loop", daemon=True).start()
            ready.wait()

    def stop(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for thread in list(self._threads.values()):
            thread.join(timeout=1.0)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def dispatch(self, tasks: list[Task]) -> None:
        """Hand a claimed batch out: counted once for the batch (not a lock per row), then
        each row to the event loop (async handlers), or in slices to the handler threads."""
        if not tasks:
            return
        self._board.hand_out(len(tasks))
        loop, states = self._loop, tasks[0].tracked.graph.states
        sync = tasks  # no event loop: no handler is async, every row goes to the threads
        if loop is not None:
            sync = [t for t in tasks if not states[t.claimed.state].handler_is_async]
        with self._queued_lock:
            self._handed_in += len(sync)
            self._async_inflight += len(tasks) - len(sync)
        if loop is not None:
            for task in tasks:
                if states[task.claimed.state].handler_is_async:
                    asyncio.run_coroutine_threadsafe(self._run_async(task), loop)
        size = slice_size(len(sync), self._options.concurrency,
                          self.timing.measured >= self._options.concurrency, self.timing.average)
        for i in range(0, len(sync), size):
            self._queue.put(deque(sync[i:i + size]))

    def finished(self) -> list[Task]:
        """Take the tasks whose outcome is in, oldest first; counted back on the board here,
        once for all (the threads only append)."""
        done, taken = self._finished, []
        while done:
            taken.append(done.popleft())
        if taken:
            self._board.take_back(len(taken))
        return taken

    def has_finished(self) -> bool:
        return bool(self._finished)

    def hand_back_unstarted(self) -> None:
        """Every row not started yet goes back at once: those queued, and the rest of the
        slices the handler threads are working through (taken from under them: a row is
        popped by one side only)."""
        for held in list(self._slices.values()):
            self._release_all(held)
        while True:
            try:
                tasks = self._queue.get_nowait()
            except queue.Empty:
                return
            if tasks is None:
                continue
            self._release_all(tasks)

    def _release_all(self, tasks: Slice) -> None:
        """Hand back every row left in ``tasks`` (unstarted): due again at once."""
        for task in take_all(tasks):
            with self._queued_lock:
                self._handed_in -= 1
            task.write = _policy.release(task.claimed, self._clock.now())
            self._finish(task)

    def _requeue_rest(self, name: str) -> None:
        """The rows of thread ``name``'s slice it has not started go back to the queue (the
        thread was abandoned, or died), for the other threads to run."""
        if rest := take_all(self._slices.pop(name, None)):
            self._queue.put(deque(rest))

    def nearest_deadline(self) -> float | None:
        """The nearest running handler's deadline (monotonic), if any runs with one."""
        deadlines = [d for t in list(self._current.values())
                     if t is not None and (d := t.deadline) is not None]
        return min(deadlines) if deadlines else None

    def next_respawn(self) -> float | None:
        return min(self._respawns) if self._respawns else None

    def tend(self) -> None:
        """Abandon handlers past their deadline and replace their threads; replace threads
        that died (more slowly when they keep dying)."""
        now = time.monotonic()
        overdue = [t for t in list(self._current.values())
                   if t is not None and (d := t.deadline) is not None and d <= now]
        for task in overdue:
            if task.abandon():
                self._current.pop(task.thread, None)
                log.warning(
                    "%s %s: handler for state %s passed its %gs deadline; abandoned",
                    task.tracked.name, task.claimed.pk, task.claimed.state, task.timeout,
                    extra={"action": "deadline"},
                )
                stack = stack_of(self._threads.get(task.thread))
                task.write = self._executor.timed_out(task, stack)
                self._finished.append(task)
                self._requeue_rest(task.thread)
                self._replace_hung(task.thread)
        for name, thread in list(self._threads.items()):
            # The board first: a dict read, where ``is_alive`` takes the thread's lock.
            if self._board.state_of(name) == ThreadState.DIED and not thread.is_alive():
                self._board.forget(name)
                del self._threads[name]
                if not self._signals.stop.is_set():
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
            if not self._signals.stop.is_set():
                self._replaced += 1
                self._spawn_thread()

    def _replace_hung(self, name: str) -> None:
        """Set an abandoned thread aside (it ends by itself if its handler ever returns) and
        start another in its place, unless that would keep more than ``max_hung`` hung."""
        thread = self._threads.pop(name, None)
        if thread is not None:
            self._hung[name] = thread
        if self._signals.stop.is_set():
            return  # stopping: nothing more will start, no thread is needed in its place
        if self.hung > self._options.hung_cap:
            self.too_many_hung = True
            return
        self._replaced += 1
        self._spawn_thread()

    def _spawn_thread(self) -> None:
        self._thread_seq += 1
        name = f"stator-handler-{self._thread_seq}"
        self._current[name] = None
        taken = Taken()
        self._taken.append(taken)
        self._board.report(name, ThreadState.IDLE)
        thread = threading.Thread(
            target=self._thread_main, args=(name, taken), name=name, daemon=True)
        self._threads[name] = thread
        thread.start()

    # -- handler threads -------------------------------------------------------------------

    def _thread_main(self, name: str, taken: Taken) -> None:
        scopes = self._executor.scopes
        scopes.keep_between_tasks()
        try:
            with handlers_see(self._executor.clock):  # once per thread, not per handler
                self._handle_tasks(name, taken)
        finally:
            try:
                scopes.settle()
            finally:
                self._thread_done()  # e.g. close this thread's Django connection

    def _handle_tasks(self, name: str, taken: Taken) -> None:
        """Slices from the queue, row by row: each row's own deadline (its slot in
        ``_current``), results appended one by one, the rest once per slice: the clock read
        a row ends on is the next one's start, timings noted and the coordinator woken."""
        board, executor, clock, current = self._board, self._executor, self._clock, self._current
        finished, kick, stop = self._finished, self._signals.kick, self._signals.stop
        half = self._options.batch_size // 2
        board.report(name, ThreadState.WAITING, notify=False)
        task: Task | None = None
        try:
            while True:
                tasks = self._queue.get()
                if tasks is None:
                    board.report(name, ThreadState.STOPPED)
                    return
                self._slices[name] = tasks
                board.report(name, ThreadState.RUNNING, notify=False)
                observe = _metrics.handler_observer()
                ran, spent = 0, 0.0
                now, mark = clock.now(), time.monotonic()
                while (task := next_row(tasks, self._slices)) is not None:
                    taken.n += 1
                    if stop.is_set():
                        task.write = _policy.release(task.claimed, clock.now())
                        self._finish(task)
                        task = None
                        continue
                    task.thread, task.started = name, mark
                    task.deadline = mark + task.timeout
                    current[name] = task
                    if executor.before(task, now):
                        now = executor.run_sync(task, clock_seen=True) or clock.now()
                    else:
                        task.finish()
                    if task.abandoned:
                        board.report(name, ThreadState.ABANDONED)
                        return  # a replacement thread took this one's place (and the rest)
                    ended = time.monotonic()
                    seconds, mark = ended - mark, ended
                    ran, spent = ran + 1, spent + seconds
                    if observe is not None:
                        observe(seconds)
                    finished.append(task)
                    task = None
                    if len(finished) >= half and not kick.is_set():
                        kick.set()
                current[name] = None
                self._slices.pop(name, None)
                if ran:
                    self.timing.note(spent, ran)
                if self.queued == 0 and not kick.is_set():
                    kick.set()  # the last slice is done: its results are in
                if self._queue.empty():
                    # Nothing held open while waiting, however long: a handler's scope may
                    # be kept only from one task to the next (``keep_between_tasks``).
                    self._executor.scopes.settle()
                    board.report(name, ThreadState.WAITING, notify=False)
        except BaseException:
            # The thread ends here; the coordinator sees DIED and starts a replacement.
            log.exception("handler thread %s died", name, extra={"action": "thread_died"})
            current.pop(name, None)
            if task is not None and task.finish():  # not abandoned by ``tend`` meanwhile
                self._finish(task)
            self._requeue_rest(name)
            board.report(name, ThreadState.DIED)
            self._signals.kick.set()

    def _finish(self, task: Task) -> None:
        """One result in (a row handed back, an async handler's, a dying thread's)."""
        self._finished.append(task)
        kick = self._signals.kick
        half = len(self._finished) >= self._options.batch_size // 2
        if (half or self.queued == 0) and not kick.is_set():
            # Setting a set Event still takes its lock and notifies.  Safe to skip: the append
            # above comes first, the coordinator clears the kick before it collects.
            kick.set()

    # -- the event loop for async handlers --------------------------------------------------

    def _loop_main(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._async_slots = asyncio.Semaphore(self._options.concurrency)
        ready.set()
        try:
            loop.run_forever()
        finally:
            try:
                loop.run_until_complete(self._executor.store.loop_done())
            finally:
                loop.close()

    async def _run_async(self, task: Task) -> None:
        assert self._async_slots is not None
        try:
            async with self._async_slots:
                if self._signals.stop.is_set():
                    task.write = _policy.release(task.claimed, self._clock.now())
                    return
                started = time.monotonic()
                task.started = started
                task.deadline = started + task.timeout
                if self._executor.before(task):
                    await self._executor.run_async(task)
                else:
                    task.finish()
                seconds = time.monotonic() - started
                _metrics.handler_seconds(seconds)
                self.timing.note(seconds)
        except Exception:
            log.exception("async handler wrapper failed", extra={"action": "async_failed"})
            if task.write is None and task.committed is None:
                task.write = _policy.release(task.claimed, self._clock.now())
        finally:
            with self._queued_lock:
                self._async_inflight -= 1
            self._finish(task)
