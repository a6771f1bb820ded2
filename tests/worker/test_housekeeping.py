"""Housekeeping on its own, on both backends: the heartbeat writes the worker's row (and
touches the liveness file), a stats period is written with what was counted, a period that
could not be written is kept for the next, and the end of a run removes the worker's row.

``guarded`` stands in for the coordinator's: it runs the database step in this thread."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from stator import ManualClock, Stator
from stator._board import Board
from stator._worker import _housekeeping
from stator._worker._housekeeping import Housekeeper, WriteUnseen
from stator._worker._listener import SqliteWatch
from stator._worker._state import Tally, WorkerOptions

from .parts import Quick

Step = Callable[[], bool | None]


def run_it(action: Step, what: str) -> bool:
    return bool(action())


def make_housekeeper(
    stator: Stator, clock: ManualClock, liveness: Path | None = None,
    write_unseen: WriteUnseen = lambda write: False,
) -> tuple[Housekeeper, Tally]:
    store = stator.store
    tally = Tally([t.name for t in store.tracked], clock.now())
    options = WorkerOptions(concurrency=3, liveness_file=liveness)
    keeper = Housekeeper(
        store, clock, Board(), tally, store.tracked, options, "test-keeper",
        healthy=lambda: list(store.tracked), write_unseen=write_unseen,
    )
    return keeper, tally


def test_a_heartbeat_writes_the_workers_row_and_the_end_removes_it(
    backend: str, clock: ManualClock, build_models: Any, make_stator: Any, tmp_path: Path
) -> None:
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], clock)
    liveness = tmp_path / "alive"
    keeper, _tally = make_housekeeper(stator, clock, liveness)
    keeper.tick(run_it)  # the first tick beats at once
    (row,) = stator.store.workers()
    assert (row.id, row.concurrency, row.models) == ("test-keeper", 3, ("orders",))
    assert liveness.exists()
    keeper.final()
    assert stator.store.workers() == []


def test_a_stats_period_is_written_and_one_not_written_is_kept(
    backend: str, clock: ManualClock, build_models: Any, make_stator: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_housekeeping, "STATS_EVERY", 0.0)  # every tick writes stats
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], clock)
    keeper, tally = make_housekeeper(stator, clock)
    tally.period["orders"].processed = 3

    keeper.tick(lambda action, what: False)  # backing off: nothing written
    assert tally.period["orders"].processed == 3 and tally.totals["orders"].processed == 0

    def counted_meanwhile(action: Step, what: str) -> bool:
        tally.period["orders"].processed += 1  # the coordinator counts while stats are written
        return run_it(action, what)

    clock.advance(1)
    keeper.tick(counted_meanwhile)
    assert tally.totals["orders"].processed == 3  # the closed period, written
    assert tally.period["orders"].processed == 1  # the count made meanwhile: the next period
    (recent,) = stator.store.recent_stats(clock.now() - timedelta(hours=1))
    assert (recent.model, recent.processed) == ("orders", 3)

    clock.advance(1)
    keeper.final()
    assert tally.totals["orders"].processed == 4
    (recent,) = stator.store.recent_stats(clock.now() - timedelta(hours=1))
    assert recent.processed == 4


def test_heartbeats_and_stats_written_unseen_on_sqlite_read_back_as_the_drivers_own(
    backend: str, clock: ManualClock, build_models: Any, make_stator: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On SQLite the worker writes its own records on the listener's connection (its
    commits do not wake the worker): the rows read back as those the driver writes."""
    if not backend.startswith("sqlite"):
        pytest.skip("the listener's connection writes on SQLite only")
    monkeypatch.setattr(_housekeeping, "STATS_EVERY", 0.0)
    monkeypatch.setattr(_housekeeping, "HEARTBEAT_EVERY", 0.0)  # every tick beats
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], clock)
    path = stator.store.sqlite_path()
    assert path is not None
    watch = SqliteWatch(path)
    written: list[str] = []

    def unseen(write: Any) -> bool:
        written.append("unseen")
        return watch.write(write)

    try:
        keeper, tally = make_housekeeper(stator, clock, write_unseen=unseen)
        tally.period["orders"].processed = 2
        keeper.tick(run_it)
        assert written == ["unseen", "unseen"]  # the heartbeat, the stats
        (row,) = stator.store.workers()
        assert (row.id, row.concurrency, row.last_seen) == ("test-keeper", 3, clock.now())
        (recent,) = stator.store.recent_stats(clock.now() - timedelta(hours=1))
        assert (recent.model, recent.processed) == ("orders", 2)
        clock.advance(5)
        keeper.tick(run_it)  # the row updated, not a second one
        (row,) = stator.store.workers()
        assert row.last_seen == clock.now()
        assert not watch.changed()  # baseline
        keeper.tick(run_it)
        assert not watch.changed()  # its own commits: no change seen
    finally:
        watch.close()
    assert not watch.write(lambda books: None)  # closed: the caller writes as usual
