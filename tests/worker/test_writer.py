"""The writer on its own, with its thread, on both backends: results of several models go in
one batch, a result whose lease was taken over is refused by the fence and counted lost, a
stale result waiting beside a newer one of the same row is left out, and a busy writer lets
results gather into a bigger batch (the flush rules)."""

from __future__ import annotations

from typing import Any

import pytest

from stator import ManualClock, Stator, _policy
from stator._board import Board
from stator._policy import Failed
from stator._worker import _writer
from stator._worker._state import Signals, Tally, WorkerOptions
from stator._worker._writer import Writer

from .parts import Quick, insert, states, wait_for


def make_writer(
    stator: Stator, clock: ManualClock, *, batch_size: int = 100, idle: list[bool] | None = None
) -> tuple[Writer, Signals, Tally]:
    store = stator.store
    signals = Signals()
    tally = Tally([t.name for t in store.tracked], clock.now())
    handlers = idle if idle is not None else [True]
    writer = Writer(
        store, Board(), signals, tally, store.tracked, WorkerOptions(batch_size=batch_size),
        "test-writer", handlers_idle=lambda: handlers[0],
    )
    return writer, signals, tally


def drain(writer: Writer, signals: Signals) -> bool:
    """Wait until the writer thread has reported every batch handed to it; True if a
    written row moved or has a next due time."""
    moved = [False]

    def step() -> None:
        signals.kick.wait(1.0)  # the writer thread sets it after each batch
        signals.kick.clear()
        moved[0] = writer.collect_written() or moved[0]

    wait_for(lambda: writer.in_flight == 0, "the writer to report its batches", step)
    return moved[0]


def test_a_batch_of_several_models_is_written_and_a_taken_over_row_counted_lost(
    backend: str, clock: ManualClock, build_models: Any, make_stator: Any
) -> None:
    a = build_models(Quick, table="a_rows")
    b = build_models(Quick, table="b_rows")
    stator = make_stator(backend, [a.Order, b.Order], clock)
    insert(stator, a.Order, 1)
    insert(stator, b.Order, 1)
    ta, tb = stator.store.tracked
    ((_obj, stale),) = stator.store.claim(ta, clock.now(), 1)
    clock.advance(ta.graph.states["new"].lease + 1)
    stator.store.claim(ta, clock.now(), 1)  # another worker takes the row over
    ((_obj, fresh),) = stator.store.claim(tb, clock.now(), 1)
    writer, signals, tally = make_writer(stator, clock)
    writer.add(ta.name, _policy.move(stale, Quick.done, clock.now()))
    writer.add(tb.name, _policy.move(fresh, Quick.done, clock.now()))
    assert writer.pending and writer.flush_due()  # the handlers are idle: nothing more comes
    writer.flush()
    assert writer.in_flight == 1 and not writer.pending  # both models, one batch
    writer.start()
    try:
        assert drain(writer, signals)
    finally:
        writer.stop()
    assert states(stator, a.Order) == {1: "new"}  # the fence held: not ours any more
    assert states(stator, b.Order) == {1: "done"}
    assert (tally.period[ta.name].lost, tally.period[ta.name].processed) == (1, 0)
    assert (tally.period[tb.name].processed, tally.period[tb.name].transitions) == (1, 1)


def test_a_stale_result_waiting_beside_a_newer_one_is_left_out(
    backend: str, clock: ManualClock, build_models: Any, make_stator: Any
) -> None:
    """A row claimed again (its lease ran out) while the result of its earlier claim still
    waited to be written: only the newer result is written, so a failure is recorded once,
    and the stale one is counted as lost."""
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], clock)
    insert(stator, models.Order, 1)
    (tracked,) = stator.store.tracked
    state = tracked.graph.states["new"]
    ((_obj, first),) = stator.store.claim(tracked, clock.now(), 1)
    clock.advance(state.lease + 1)
    ((_obj, second),) = stator.store.claim(tracked, clock.now(), 1)
    writer, signals, tally = make_writer(stator, clock)
    for claim, message in ((first, "stale"), (second, "current")):
        writer.add(tracked.name, _policy.after_run(
            tracked.graph, claim, Failed("error", message), clock.now()
        ))
    writer.flush()
    writer.start()
    try:
        drain(writer, signals)
    finally:
        writer.stop()
    assert [e["message"] for e in stator.status()["errors"]] == ["current"]
    counters = tally.period[tracked.name]
    assert (counters.lost, counters.processed, counters.errors) == (1, 1, 1)


def test_a_busy_writer_lets_results_gather_into_a_bigger_batch(
    backend: str, clock: ManualClock, build_models: Any, make_stator: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_writer, "FLUSH_DELAY", 3600.0)  # no result is ever old enough here
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], clock)
    insert(stator, models.Order, 1, 2, 3, 4)
    (tracked,) = stator.store.tracked
    claims = [c for _obj, c in stator.store.claim(tracked, clock.now(), 4)]
    releases = [_policy.release(c, clock.now()) for c in claims]
    idle = [False]
    writer, signals, tally = make_writer(stator, clock, batch_size=3, idle=idle)
    assert not writer.pending
    writer.add(tracked.name, releases[0])
    assert not writer.flush_due()  # one young result while handlers still run: wait
    idle[0] = True
    assert writer.flush_due()  # the handlers are idle: nothing more is coming
    writer.flush()
    writer.add(tracked.name, releases[1])
    writer.add(tracked.name, releases[2])
    assert not writer.flush_due()  # the writer is busy: gather, idle or not
    writer.add(tracked.name, releases[3])
    assert writer.flush_due()  # a full batch goes at once
    writer.flush()
    assert writer.in_flight == 2
    writer.start()
    try:
        drain(writer, signals)
    finally:
        writer.stop()
    counters = tally.period[tracked.name]
    assert (counters.processed, counters.lost, counters.transitions) == (4, 0, 0)


def test_a_stopping_worker_flushes_whatever_waits(
    backend: str, clock: ManualClock, build_models: Any, make_stator: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_writer, "FLUSH_DELAY", 3600.0)
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], clock)
    insert(stator, models.Order, 1)
    (tracked,) = stator.store.tracked
    ((_obj, claim),) = stator.store.claim(tracked, clock.now(), 1)
    writer, signals, _tally = make_writer(stator, clock, idle=[False])
    writer.add(tracked.name, _policy.release(claim, clock.now()))
    assert not writer.flush_due()
    signals.stop.set()
    assert writer.flush_due()
