"""The handler executor on its own, on both backends: a handler past its deadline is
abandoned and its thread replaced, a thread that dies is replaced, async handlers run on the
event loop, and rows not started when the worker stops are handed back.

The tests drive the pool as the coordinator does: ``tend`` it, take what ``finished`` gives,
and wait on the kick (or a handler's deadline) in between."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from stator import State, StateGraph, Stator, SystemClock
from stator._board import Board, ThreadState
from stator._execute import Executor, Task
from stator._worker._handlers import HandlerPool
from stator._worker._state import Signals, WorkerOptions

from .parts import PATIENCE, Quick, insert, wait_for

release = threading.Event()
started = threading.Event()


class Hangs(StateGraph):
    new = State(timeout=0.3, retry_after=600)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        if row.note == "hang":
            started.set()
            release.wait(PATIENCE)  # far past the deadline: the pool must not wait for it
        if row.note == "die":
            raise SystemExit("a handler that ends its thread")
        return cls.done


class Waits(StateGraph):
    new = State(timeout=30, retry_after=600)
    done = State()
    new.transitions_to(done)

    @classmethod
    async def check_new(cls, row: Any) -> State:
        return cls.done


class RaisesAsync(StateGraph):
    """Async handlers raising what is no ``Exception`` (by the row's note)."""

    new = State(timeout=30, retry_after=600)
    done = State()
    new.transitions_to(done)

    @classmethod
    async def check_new(cls, row: Any) -> State:
        kinds: dict[str, type[BaseException]] = {
            "exit": SystemExit, "interrupt": KeyboardInterrupt, "cancelled": asyncio.CancelledError,
        }
        if row.note in kinds:
            raise kinds[row.note](f"{row.note} from an async handler")
        return cls.done


class Pool:
    """A started pool with what the coordinator would hold beside it."""

    def __init__(
        self, stator: Stator, concurrency: int, with_loop: bool = False,
        max_hung: int | None = None,
    ) -> None:
        self.stator = stator
        self.board = Board()
        self.signals = Signals()
        self.executor = Executor(stator.store, stator.clock, "test-pool")
        self.pool = HandlerPool(
            self.executor, stator.clock, self.board, self.signals,
            WorkerOptions(concurrency=concurrency, max_hung=max_hung), stator.store.thread_done,
            with_loop,
        )

    def hand_out(self, count: int) -> list[Task]:
        (tracked,) = self.stator.store.tracked
        rows = self.stator.store.claim(tracked, self.stator.clock.now(), count)
        tasks = [self.executor.prepare(tracked, obj, claimed) for obj, claimed in rows]
        self.pool.dispatch(tasks)
        return tasks

    def take(self, count: int) -> list[Task]:
        """The next ``count`` finished tasks, tending the pool meanwhile."""
        got: list[Task] = []

        def step() -> None:
            self.pool.tend()
            got.extend(self.pool.finished())
            if len(got) < count:
                deadline = self.pool.nearest_deadline()
                wait = 1.0 if deadline is None else max(deadline - time.monotonic(), 0.005)
                self.signals.kick.wait(min(wait, 1.0))
                self.signals.kick.clear()

        wait_for(lambda: len(got) >= count, f"{count} finished task(s)", step)
        return got


@contextmanager
def started_pool(
    stator: Stator, concurrency: int, with_loop: bool = False, max_hung: int | None = None,
) -> Iterator[Pool]:
    pool = Pool(stator, concurrency, with_loop, max_hung)
    pool.pool.start()
    try:
        yield pool
    finally:
        release.set()
        pool.signals.stop.set()
        pool.pool.stop()


def hanging(backend: str, build_models: Any, make_stator: Any) -> tuple[Any, Any]:
    """A store whose rows run ``Hangs``, with its events reset for this test."""
    release.clear()
    started.clear()
    models = build_models(Hangs)
    return models, make_stator(backend, [models.Order], SystemClock())


def test_a_handler_past_its_deadline_is_abandoned_and_its_thread_replaced(
    backend: str, build_models: Any, make_stator: Any
) -> None:
    models, stator = hanging(backend, build_models, make_stator)
    insert(stator, models.Order, 1, note="hang")
    with started_pool(stator, concurrency=1) as p:
        p.hand_out(1)
        assert started.wait(PATIENCE)
        (task,) = p.take(1)
        assert task.abandoned and task.thread == "stator-handler-1"
        assert task.write is not None and task.write.failure is not None
        assert task.write.failure.kind == "timeout"
        assert "check_new" in task.write.failure.traceback  # where the thread hung
        assert p.pool.nearest_deadline() is None  # its deadline is dealt with: no wait on it
        assert p.pool.replaced == 1
        insert(stator, models.Order, 2, note="fine")
        p.hand_out(1)
        (task,) = p.take(1)
        assert task.thread == "stator-handler-2"  # the replacement runs the next row
        assert task.write is not None and task.write.state == "done"
        release.set()  # the abandoned handler returns; its thread ends by itself

        def abandoned() -> bool:
            return p.board.state_of("stator-handler-1") == ThreadState.ABANDONED

        wait_for(abandoned, "the abandoned thread to end", lambda: p.board.wait(1.0))
    assert p.board.outstanding() == 0


def test_no_more_than_max_hung_hung_threads_are_replaced(
    backend: str, build_models: Any, make_stator: Any
) -> None:
    """A hung thread keeps running (and keeps its connection) whatever the pool does, so the
    pool replaces at most ``max_hung`` of them: one more and it replaces nothing and says
    ``too_many_hung``.  Handler threads stay within concurrency + max_hung."""
    models, stator = hanging(backend, build_models, make_stator)
    insert(stator, models.Order, 1, 2, 3, note="hang")
    before = set(threading.enumerate())
    with started_pool(stator, concurrency=1, max_hung=1) as p:
        for hung in (1, 2):
            started.clear()
            p.hand_out(1)
            assert started.wait(PATIENCE)
            (task,) = p.take(1)
            assert task.abandoned and p.pool.hung == hung
        assert p.pool.replaced == 1  # the first one only
        assert p.pool.too_many_hung
        handlers = [t for t in set(threading.enumerate()) - before
                    if t.name.startswith("stator-handler-")]
        assert len(handlers) == 2  # concurrency 1 + max_hung 1, both hung
        started.clear()
        p.hand_out(1)
        assert not started.wait(0.05) and p.pool.queued == 1  # no thread left to start it
        release.set()
        for thread in handlers:
            thread.join(PATIENCE)
        assert p.pool.hung == 0  # their handlers returned: their threads ended


def test_a_handler_thread_that_dies_is_replaced(
    backend: str, build_models: Any, make_stator: Any
) -> None:
    models = build_models(Hangs)
    stator = make_stator(backend, [models.Order], SystemClock())
    insert(stator, models.Order, 1, note="die")
    with started_pool(stator, concurrency=1) as p:
        p.hand_out(1)
        (task,) = p.take(1)
        assert isinstance(task.error, SystemExit)
        assert task.write is not None and task.write.failure is not None

        def tend() -> None:  # the dead thread reports DIED, then ends: wait on the board
            p.pool.tend()
            p.board.wait(0.05)

        wait_for(lambda: p.pool.replaced == 1, "the dead thread to be replaced", tend)
        insert(stator, models.Order, 2, note="fine")
        p.hand_out(1)
        (task,) = p.take(1)
        assert task.thread == "stator-handler-2"
        assert task.write is not None and task.write.state == "done"


def hand_out_in_one_slice(p: Pool, count: int, first: str) -> None:
    """Claim ``count`` rows and hand them out as timed handlers' rows are: in slices (one
    per thread), the row whose note is ``first`` at the head of the first."""
    timing = p.pool.timing
    timing.measured, timing.average = 1000, 0.0001  # as if handlers had been timed: quick
    (tracked,) = p.stator.store.tracked
    rows = p.stator.store.claim(tracked, p.stator.clock.now(), count)
    tasks = [p.executor.prepare(tracked, obj, claimed) for obj, claimed in rows]
    p.pool.dispatch(sorted(tasks, key=lambda t: t.obj.note != first))


@pytest.mark.parametrize("note", ["hang", "die"])
def test_the_rest_of_a_slice_runs_when_its_thread_is_abandoned_or_dies(
    backend: str, build_models: Any, make_stator: Any, note: str
) -> None:
    """Rows reach the threads a slice at a time.  The rows after one whose handler hangs past
    its deadline, or ends its thread, go to another thread at once: not stranded behind it
    until their lease runs out.  (Behind a hung handler, what lease they have left is less
    than a deadline: that thread hands them back, due at once.)"""
    models, stator = hanging(backend, build_models, make_stator)
    insert(stator, models.Order, 1, note=note)
    insert(stator, models.Order, 2, 3, 4, note="fine")
    with started_pool(stator, concurrency=1) as p:
        hand_out_in_one_slice(p, 4, first=note)
        tasks = {t.claimed.pk: t for t in p.take(4)}
        assert sorted(tasks) == [1, 2, 3, 4]
        assert tasks[1].write is not None and tasks[1].write.failure is not None
        now = stator.clock.now()
        for pk in (2, 3, 4):
            write = tasks[pk].write
            assert write is not None and write.failure is None
            due_now = write.state_next is not None and write.state_next <= now
            assert write.state == "done" or due_now
            assert tasks[pk].thread != tasks[1].thread  # taken up by the thread in its place


def test_a_free_thread_takes_the_rows_waiting_behind_a_slow_one(
    backend: str, build_models: Any, make_stator: Any
) -> None:
    """Two threads, two slices: one starts with a row whose handler runs on (here past its
    deadline).  The other thread, its own slice done, takes the row waiting behind it: all
    three quick rows are done while the slow one still runs."""
    models, stator = hanging(backend, build_models, make_stator)
    insert(stator, models.Order, 1, note="hang")
    insert(stator, models.Order, 2, 3, 4, note="fine")
    with started_pool(stator, concurrency=2) as p:
        hand_out_in_one_slice(p, 4, first="hang")
        assert started.wait(PATIENCE)
        tasks = p.take(3)
        assert sorted(t.claimed.pk for t in tasks) == [2, 3, 4]
        assert all(t.write is not None and t.write.state == "done" for t in tasks)
        assert not p.pool.has_finished()  # the slow one: still running


def test_the_coordinator_is_woken_when_the_last_results_are_in(
    backend: str, build_models: Any, make_stator: Any
) -> None:
    """Results are counted back once per slice, not per row: the kick comes when the last
    row handed out has run (every row taken, its result appended), and the counts agree."""
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], SystemClock())
    insert(stator, models.Order, 1, 2, 3)
    with started_pool(stator, concurrency=1) as p:
        p.hand_out(3)  # untimed handlers: a slice per row, three hand-offs
        assert p.signals.kick.wait(PATIENCE)
        tasks = p.pool.finished()
        assert sorted(t.claimed.pk for t in tasks) == [1, 2, 3]
        assert all(t.write is not None and t.write.state == "done" for t in tasks)
        assert p.pool.queued == 0 and p.pool.backlog == 0
        assert p.board.outstanding() == 0 and p.pool.nearest_deadline() is None


def test_async_handlers_run_on_the_event_loop(
    backend: str, build_models: Any, make_stator: Any
) -> None:
    models = build_models(Waits)
    stator = make_stator(backend, [models.Order], SystemClock())
    insert(stator, models.Order, 1, 2, 3)
    with started_pool(stator, concurrency=2, with_loop=True) as p:
        p.hand_out(3)
        assert p.pool.queued == 0  # none went to the handler threads' queue
        tasks = p.take(3)
        assert sorted(t.claimed.pk for t in tasks) == [1, 2, 3]
        assert all(t.write is not None and t.write.state == "done" for t in tasks)
        assert p.pool.backlog == 0
        assert p.pool.timing.measured == 2  # capped at the concurrency


@pytest.mark.parametrize("note", ["exit", "interrupt", "cancelled"])
def test_an_async_handler_raising_a_base_exception_is_a_failure(
    backend: str, build_models: Any, make_stator: Any, note: str
) -> None:
    """Recorded against its row like any error, and the event loop carries on (a
    ``SystemExit`` or ``KeyboardInterrupt`` let out of a task would stop the loop)."""
    models = build_models(RaisesAsync)
    stator = make_stator(backend, [models.Order], SystemClock())
    insert(stator, models.Order, 1, note=note)
    with started_pool(stator, concurrency=1, with_loop=True) as p:
        p.hand_out(1)
        (task,) = p.take(1)
        assert task.write is not None and task.write.failure is not None
        assert task.write.failure.kind == "error"
        assert f"{note} from an async handler" in task.write.failure.traceback
        insert(stator, models.Order, 2, note="fine")
        p.hand_out(1)
        (task,) = p.take(1)
        assert task.write is not None and task.write.state == "done"


def test_rows_not_started_at_a_stop_are_handed_back(
    backend: str, build_models: Any, make_stator: Any
) -> None:
    models, stator = hanging(backend, build_models, make_stator)
    insert(stator, models.Order, 1, 2, 3, note="hang")
    with started_pool(stator, concurrency=1) as p:
        p.hand_out(3)
        assert started.wait(PATIENCE)  # one runs; the other two wait in the queue
        p.signals.stop.set()
        p.pool.hand_back_unstarted()
        handed_back = list(p.pool.finished())
        assert len(handed_back) == 2 and p.pool.queued == 0
        for task in handed_back:
            assert task.write is not None and task.write.failure is None
            assert task.write.state == "new" and task.thread == ""  # never started


class SettleSpy:
    """The executor's handler scopes, noting which threads settle them."""

    def __init__(self, scopes: Any) -> None:
        self.scopes = scopes
        self.settled: list[str] = []

    def for_thread(self, task: Task) -> Any:
        return self.scopes.for_thread(task)

    def for_async(self, task: Task) -> Any:
        return self.scopes.for_async(task)

    def keep_between_tasks(self) -> None:
        self.scopes.keep_between_tasks()

    def settle(self) -> None:
        self.settled.append(threading.current_thread().name)
        self.scopes.settle()


def test_a_handler_thread_settles_its_scope_before_it_waits(
    backend: str, build_models: Any, make_stator: Any
) -> None:
    """A scope kept open from one task to the next (Django's atomic block) is closed as
    soon as the queue is empty, not when the thread ends: it must not stay open while the
    thread waits for more work, however long that is."""
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], SystemClock())
    insert(stator, models.Order, 1)
    p = Pool(stator, concurrency=1)
    spy = SettleSpy(p.executor.scopes)
    p.executor.scopes = spy
    p.pool.start()
    try:
        p.hand_out(1)
        (task,) = p.take(1)
        assert task.write is not None and task.write.state == "done"

        def waiting() -> bool:
            return p.board.state_of("stator-handler-1") == ThreadState.WAITING

        wait_for(waiting, "the handler thread to wait", lambda: p.board.wait(0.05))
        assert spy.settled == ["stator-handler-1"]
    finally:
        p.signals.stop.set()
        p.pool.stop()
