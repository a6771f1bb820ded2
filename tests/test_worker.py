"""The worker runtime in-process, on both backends, with real time: deadlines cut off
hanging handlers (sync: abandoned and the thread replaced; async: cancelled), a dying
handler thread is replaced, and a run ends by itself once the system is quiet.

Waits are bounded polls of the database; nothing here asserts how fast anything was."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from stator import State, StateGraph, SystemClock
from stator._worker import RunSummary, Worker

released = threading.Event()


class HangsSync(StateGraph):
    new = State(timeout=0.3, retry_after=600)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, order: Any) -> State:
        released.wait(20)  # far past the deadline: the worker must not wait for it
        return cls.done


class HangsAsync(StateGraph):
    new = State(timeout=0.3, retry_after=600)
    done = State()
    new.transitions_to(done)

    @classmethod
    async def check_new(cls, order: Any) -> State:
        await asyncio.sleep(20)
        return cls.done


class DiesOnce(StateGraph):
    new = State(retry_after=600)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, order: Any) -> State:
        if order.note == "die":
            raise SystemExit("a handler that ends its thread")
        return cls.done


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout:g}s")
        time.sleep(0.05)


@contextmanager
def running(worker: Worker) -> Iterator[list[RunSummary]]:
    result: list[RunSummary] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()))
    thread.start()
    try:
        yield result
    finally:
        worker.stop("test over")
        thread.join(30)
        assert not thread.is_alive(), "the worker did not stop"


def count(stator: Any, model: Any, *where: Any) -> int:
    with Session(stator.engine) as session:
        return int(session.scalar(select(func.count()).select_from(model).where(*where)) or 0)


def test_handlers_past_their_deadline_are_cut_off(backend, build_models, make_stator):
    released.clear()
    sync = build_models(HangsSync, table="sync_rows")
    async_ = build_models(HangsAsync, table="async_rows")
    stator = make_stator(backend, [sync.Order, async_.Order], SystemClock())
    with Session(stator.engine) as session:
        session.add_all([sync.Order(id=1), async_.Order(id=1)])
        session.commit()
    worker = stator.worker(concurrency=2)
    with running(worker) as result:
        wait_until(
            lambda: count(stator, sync.Order, sync.Order.state_attempts == 1) == 1
            and count(stator, async_.Order, async_.Order.state_attempts == 1) == 1,
            "both timeouts to be recorded",
        )
        released.set()  # the abandoned sync handler now returns "done": too late
        wait_until(lambda: worker.board.outstanding() == 0, "the worker to settle")
    summary = result[0]
    assert summary.threads_replaced >= 1
    assert count(stator, sync.Order, sync.Order.state == "new") == 1  # late result discarded
    assert count(stator, async_.Order, async_.Order.state == "new") == 1
    kinds = {e["kind"] for e in stator.status()["errors"]}
    assert kinds == {"timeout"}


def test_a_handler_thread_that_dies_is_replaced(backend, build_models, make_stator):
    models = build_models(DiesOnce)
    stator = make_stator(backend, [models.Order], SystemClock())
    with Session(stator.engine) as session:
        session.add_all([models.Order(id=1, note="die")])
        session.add_all([models.Order(id=i, note="fine") for i in range(2, 12)])
        session.commit()
    summary = stator.run(concurrency=1, until_idle=True, idle_window=0.2)
    assert summary.reason == "idle"
    assert summary.threads_replaced >= 1
    assert count(stator, models.Order, models.Order.state == "done") == 10
    errors = stator.status()["errors"]
    assert [e["row_pk"] for e in errors] == ["1"]
    assert "SystemExit" in errors[0]["message"]


def test_until_idle_counts_what_it_did(backend, build_models, make_stator):
    models = build_models(DiesOnce)
    stator = make_stator(backend, [models.Order], SystemClock())
    with Session(stator.engine) as session:
        session.add_all([models.Order(id=i, note="fine") for i in range(1, 51)])
        session.commit()
    summary = stator.run(until_idle=True, idle_window=0.2)
    assert (summary.reason, summary.processed, summary.transitions) == ("idle", 50, 50)
    assert stator.status()["workers"] == []  # a clean exit removes the heartbeat row


def test_the_next_claim_runs_while_the_last_batchs_rows_are_still_unstarted(
    backend, build_models, make_stator
):
    """Once handlers are timed (fast), a worker holds up to two batches of unstarted rows:
    it claims the next batch as soon as half a batch fits, so its handler threads are not
    left idle while that claim runs.  Before they are timed, no more than can start."""
    models = build_models(HangsSync)
    stator = make_stator(backend, [models.Order], SystemClock(), batch_size=10)
    worker = stator.worker(concurrency=2)
    pool = worker._handlers
    backlog = {"rows": 0}
    pool_type = type(pool)
    original = pool_type.backlog
    pool_type.backlog = property(lambda self: backlog["rows"])  # type: ignore[assignment]
    try:
        assert worker._room() == 2  # untimed: the threads' worth
        backlog["rows"] = 2
        assert worker._room() == 0
        pool.timing.note(0.001, runs=10)  # timed: a millisecond a row
        for rows, room in [(0, 10), (10, 10), (14, 6), (15, 5), (16, 0), (20, 0)]:
            backlog["rows"] = rows
            assert worker._room() == room, rows
    finally:
        pool_type.backlog = original  # type: ignore[method-assign]
