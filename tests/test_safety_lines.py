"""Fast tests for the lines that make Stator safe, each one written to fail when its line is
removed (``scripts/mutants.sh`` removes each and checks that this happens):

- the lease-time-left check: a row whose lease would run out before its handler's deadline
  is handed back unstarted, never run;
- the wake-ups: an idle worker notices new work because it is told, not by polling (it does
  not poll at all once nothing is due);
- the hand-back on a graceful stop: claimed rows that no handler started are made due again
  at once, while the running handler is still running.

The lines of the drivers themselves (``FOR UPDATE SKIP LOCKED`` in the claim, the lease in
the fence of a write and of a delete) are the conformance suite's, tests/driver/, which runs
them on both drivers and both databases.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from stator import State, StateGraph, Stator, SystemClock
from stator._execute import Executor


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout:g}s")
        time.sleep(0.02)


def insert(stator: Stator, model: Any, *pks: int, note: str | None = None) -> None:
    with Session(stator.engine) as session:
        session.add_all([model(id=pk, note=note) for pk in pks])
        session.commit()


def rows(stator: Stator, model: Any) -> dict[int, Any]:
    with Session(stator.engine) as session:
        return {r.id: r for r in session.scalars(select(model))}


class Quick(StateGraph):
    new = State(timeout=10)
    done = State(delete_after=60)
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        return cls.done


# -- the lease-time-left check --------------------------------------------------------------------


def test_a_row_without_lease_left_for_its_deadline_is_handed_back_unstarted(
    backend, clock, build_models, make_stator
):
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], clock)
    insert(stator, models.Order, 1)
    (tracked,) = stator.store.tracked
    ((obj, claimed),) = stator.store.claim(tracked, clock.now(), 1)
    executor = Executor(stator.store, clock)
    task = executor.prepare(tracked, obj, claimed)
    lease = (claimed.lease_until - clock.now()).total_seconds()
    clock.advance(lease - task.timeout / 2)  # half a deadline of lease left
    assert executor.before(task) is False  # the handler must not start
    assert task.write is not None and task.write.state == "new"
    assert task.write.state_next == clock.now()  # handed back, due at once


# -- wake-ups -------------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["insert", "transition"])
def test_an_idle_worker_is_woken_by_new_work(backend, build_models, make_stator, route):
    class Waits(StateGraph):
        held = State(externally_progressed=True)
        new = State(timeout=10)
        done = State()
        held.transitions_to(new)
        new.transitions_to(done)

        @classmethod
        def check_new(cls, row: Any) -> State:
            return cls.done

    models = build_models(Waits)
    stator = make_stator(backend, [models.Order], SystemClock())
    if route == "transition":
        insert(stator, models.Order, 1)  # held: nothing due
    worker = stator.worker()
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        # Idle: it claimed, found nothing, and (with nothing due) sleeps until told.
        wait_for(lambda: worker._maybe_due is False and worker._next_due is None,
                 "the worker to go idle")
        if route == "insert":
            with Session(stator.engine) as session:
                now = SystemClock().now()  # a row inserted straight into a state with work
                session.add(models.Order(id=2, state="new", state_changed=now, state_next=now))
                session.commit()
            pk = 2
        else:
            with Session(stator.engine) as session:
                session.get(models.Order, 1).transition_perform(Waits.new)
                session.commit()
            pk = 1
        # Told, it starts within milliseconds; untold, it would sleep for ever.
        wait_for(lambda: rows(stator, models.Order)[pk].state == "done", "the new work done",
                 timeout=10)
    finally:
        worker.stop("test over")
        thread.join(30)


# -- the hand-back on a graceful stop -------------------------------------------------------------


started = threading.Event()
release = threading.Event()
ran: list[int] = []


class Blocks(StateGraph):
    new = State(timeout=30)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        ran.append(row.id)
        started.set()
        release.wait(30)
        return cls.done


def test_a_graceful_stop_hands_unstarted_rows_back_at_once(backend, build_models, make_stator):
    started.clear()
    release.clear()
    ran.clear()
    models = build_models(Blocks)
    stator = make_stator(backend, [models.Order], SystemClock())
    insert(stator, models.Order, 1, 2, 3, 4, 5)
    worker = stator.worker(concurrency=1)
    # As if handlers had been timed already: claim a batch, not one row per free thread.
    timing = worker._handlers.timing
    timing.measured, timing.average = worker.options.concurrency, 0.001
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        assert started.wait(30)
        wait_for(lambda: all(r.state_next > SystemClock().now() + timedelta(seconds=10)
                             for r in rows(stator, models.Order).values()),
                 "every row to be claimed")
        worker.stop("test")

        def handed_back() -> bool:
            now = SystemClock().now()
            waiting = [r for pk, r in rows(stator, models.Order).items() if pk not in ran]
            return len(waiting) == 4 and all(r.state_next <= now for r in waiting)

        # ... while the one running handler still runs: not when it ends, not at lease expiry
        wait_for(handed_back, "the unstarted rows to be handed back", timeout=10)
    finally:
        release.set()
        thread.join(30)
    assert len(ran) == 1
    final = rows(stator, models.Order)
    assert final[ran[0]].state == "done"
    assert sorted(pk for pk, r in final.items() if r.state == "new") == sorted(
        set(range(1, 6)) - set(ran))
