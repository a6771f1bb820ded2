"""Stator's own records through a driver: workers (``heartbeat``, ``forget_worker``,
``workers``), stats (``record_stats``, ``recent_stats``) and errors (``recent_errors``)."""

from __future__ import annotations

from datetime import datetime, timedelta

from driver_rig import Flow, Rig

from stator import ManualClock
from stator._policy import Failed, after_run
from stator._store import Heartbeat, ModelStats, StatsPeriod
from stator._store.interface import Driver


def beat(driver: Driver, worker: str, now: datetime, models: list[str],
         started: datetime | None = None) -> None:
    driver.heartbeat(Heartbeat(worker, started or now, now, 4, tuple(models), {"t-1": "idle"},
                               123))


def test_a_heartbeat_records_the_worker_and_a_later_one_updates_it(
    rig: Rig, clock: ManualClock
) -> None:
    driver = rig.driver(rig.model(Flow))
    now = clock.now()
    beat(driver, "w-1", now, ["orders"])
    beat(driver, "w-1", now + timedelta(seconds=10), ["orders"], started=now)
    (worker,) = driver.workers()
    assert (worker.id, worker.pid, worker.concurrency, worker.models) == (
        "w-1", 123, 4, ("orders",))
    assert worker.last_seen == now + timedelta(seconds=10)
    assert worker.started_at == now
    assert worker.threads == {"t-1": "idle"}


def test_workers_are_listed_by_the_models_they_run_and_forgotten_as_they_stop(
    rig: Rig, clock: ManualClock
) -> None:
    driver = rig.driver(rig.model(Flow))
    now = clock.now()
    beat(driver, "w-1", now, ["orders"])
    beat(driver, "w-2", now, ["parcels", "orders"])
    beat(driver, "w-3", now, ["parcels"])
    assert sorted(w.id for w in driver.workers(["orders"])) == ["w-1", "w-2"]
    driver.forget_worker("w-2")
    assert sorted(w.id for w in driver.workers()) == ["w-1", "w-3"]


def stats(model: str, end: datetime, processed: int, lag: float) -> StatsPeriod:
    return StatsPeriod(
        worker_id="w-1", model=model, period_start=end - timedelta(seconds=10),
        period_end=end, processed=processed, transitions=processed - 1, errors=1,
        timeouts=0, deleted=0, lost=2, queue_depth=7, lag_seconds=lag,
    )


def test_recorded_stats_are_summed_per_model_since_a_time(rig: Rig, clock: ManualClock) -> None:
    driver = rig.driver(rig.model(Flow))
    now = clock.now()
    long_ago = now - timedelta(days=30)
    driver.record_stats([stats("orders", now - timedelta(hours=2), 100, 9.0)], long_ago)
    driver.record_stats([stats("orders", now, 5, 1.5), stats("parcels", now, 3, 0.5)],
                        long_ago)
    recent = {s.model: s for s in driver.recent_stats(now - timedelta(seconds=30))}
    assert recent["orders"] == ModelStats(model="orders", processed=5, transitions=4, errors=1,
                                          timeouts=0, lost=2, max_lag=1.5)
    assert recent["parcels"].processed == 3
    everything = {s.model: s for s in driver.recent_stats(long_ago)}
    assert (everything["orders"].processed, everything["orders"].max_lag) == (105, 9.0)


def test_recording_stats_prunes_old_stats_errors_and_workers(
    rig: Rig, clock: ManualClock
) -> None:
    driver = rig.driver(rig.model(Flow))
    rig.insert(driver, {"id": 1})
    (tracked,) = driver.tracked
    [(_obj, claimed)] = driver.claim(tracked, clock.now(), 1)
    driver.write(tracked, [after_run(Flow, claimed, Failed("error", "E: old"), clock.now())])
    beat(driver, "w-old", clock.now(), ["orders"])
    driver.record_stats([stats("orders", clock.now(), 5, 0.0)], clock.now())
    assert driver.recent_errors() != [] and driver.workers() != []

    later = clock.advance(3600)
    driver.record_stats([stats("orders", later, 1, 0.0)], later - timedelta(seconds=60))
    assert [s.processed for s in driver.recent_stats(later - timedelta(days=1))] == [1]
    assert driver.recent_errors() == []
    assert driver.workers() == []


def test_recent_errors_are_the_newest_first_and_of_the_models_asked_for(
    rig: Rig, clock: ManualClock
) -> None:
    driver = rig.driver(rig.model(Flow, table="orders"), rig.model(Flow, table="parcels"))
    for tracked in driver.tracked:
        rig.insert(driver, {"id": 1}, {"id": 2}, tracked=tracked)
        for _obj, claimed in sorted(driver.claim(tracked, clock.now(), 2),
                                    key=lambda pair: pair[1].pk):
            failure = Failed("error", f"E: {tracked.name} {claimed.pk}")
            driver.write(tracked, [after_run(Flow, claimed, failure, clock.now())])
    assert [e.message for e in driver.recent_errors()] == [
        "E: parcels 2", "E: parcels 1", "E: orders 2", "E: orders 1"]
    assert [e.message for e in driver.recent_errors(limit=1)] == ["E: parcels 2"]
    assert [e.message for e in driver.recent_errors(models=["orders"])] == [
        "E: orders 2", "E: orders 1"]
