"""PostgreSQL: a due row another session holds locked (``SELECT … FOR UPDATE`` by the
application) is passed by every claim (``SKIP LOCKED``).  The worker must neither spin on it
nor wait for it: it backs off between claims, and ``until_idle`` counts it as not its own.

Counts, not timings: how many claims a worker made, and the waits it asked for."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from stator import State, StateGraph, SystemClock
from stator._worker import Worker

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


class Simple(StateGraph):
    new = State(retry_after=600)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        return cls.done


@contextmanager
def row_locked(url: str, table: str, pk: int) -> Iterator[None]:
    """Another session holding ``SELECT … FOR UPDATE`` on one row until the block ends."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn, conn.begin():
            locked = conn.execute(text(f"SELECT id FROM {table} WHERE id = {pk} FOR UPDATE"))
            assert locked.all() == [(pk,)]
            yield
    finally:
        engine.dispose()


def counting_claims(worker: Worker) -> list[int]:
    """Count the store's claim calls made by ``worker`` (one entry per call: rows got)."""
    calls: list[int] = []
    claim = worker.store.claim

    def counted(*args: Any, **kwargs: Any) -> Any:
        rows = claim(*args, **kwargs)
        calls.append(len(rows))
        return rows

    worker.store.claim = counted  # type: ignore[method-assign]
    return calls


def make_rows(stator: Any, model: Any, ids: list[int]) -> None:
    with Session(stator.engine) as session:
        session.add_all([model(id=i) for i in ids])
        session.commit()


def states(stator: Any, table: str) -> dict[int, str]:
    with stator.engine.connect() as conn:
        return dict(conn.execute(text(f"SELECT id, state FROM {table}")).all())  # type: ignore[arg-type]


def test_until_idle_exits_while_a_due_row_is_locked_elsewhere(backend, build_models, make_stator):
    models = build_models(Simple)
    stator = make_stator(backend, [models.Order], SystemClock())
    make_rows(stator, models.Order, [1, 2])
    worker = stator.worker(until_idle=True, idle_window=0.2, run_for=30)
    with row_locked(backend, "orders", 1):
        summary = worker.run()
    assert summary.reason == "idle"  # not "run-for elapsed": it did not wait for row 1
    assert states(stator, "orders") == {1: "new", 2: "done"}
    # Once the lock is gone, the row is claimable again: a new run takes it.
    assert stator.run(until_idle=True, idle_window=0.2).processed == 1


def test_a_due_row_locked_elsewhere_is_claimed_with_back_off_not_in_a_loop(
    backend, build_models, make_stator
):
    models = build_models(Simple)
    stator = make_stator(backend, [models.Order], SystemClock())
    make_rows(stator, models.Order, [1])
    worker = stator.worker(run_for=1.5)
    calls = counting_claims(worker)
    with row_locked(backend, "orders", 1):
        summary = worker.run()
    assert summary.reason == "run-for elapsed" and summary.processed == 0
    # Back-off from 10 ms doubling: about 8 claims in 1.5 s (without it, one every 10 ms).
    assert 2 <= len(calls) <= 15, calls
    assert not any(calls)
    assert worker._passed_by >= 2


def test_each_empty_claim_waits_longer_and_a_claim_that_gets_rows_resets_it(
    backend, build_models, make_stator
):
    models = build_models(Simple)
    stator = make_stator(backend, [models.Order], SystemClock())
    make_rows(stator, models.Order, [1])
    worker = stator.worker()
    with row_locked(backend, "orders", 1):
        for passed_by in range(1, 5):
            assert worker._claim() is False
            assert worker._passed_by == passed_by
            assert worker._sleep_time() > 0 and not worker._maybe_due  # no claim at once
    worker._maybe_due = True
    assert worker._claim() is True  # the lock is gone: the row is claimed, the count reset
    assert worker._passed_by == 0
