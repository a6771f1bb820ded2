"""What a driver reads for the engine's scheduling and for status: ``next_due``,
``due_depth`` and ``state_counts``."""

from __future__ import annotations

from datetime import timedelta

from driver_rig import Flow, Rig

from stator import ManualClock
from stator._store.interface import DueDepth


def test_next_due_is_the_earliest_time_a_row_needs_the_engine(
    rig: Rig, clock: ManualClock
) -> None:
    """Handled rows by their due time, deletions by theirs, rows at rest not at all."""
    driver = rig.driver(rig.model(Flow))
    assert driver.next_due(driver.tracked) is None
    now = clock.now()
    rig.insert(driver,
               {"id": 1, "state": "new", "state_changed": now,
                "state_next": now + timedelta(seconds=50)},
               {"id": 2, "state": "held", "state_changed": now, "state_next": None})
    assert driver.next_due(driver.tracked) == now + timedelta(seconds=50)
    rig.insert(driver, {"id": 3, "state": "done", "state_changed": now,
                        "state_next": now + timedelta(seconds=20)})
    assert driver.next_due(driver.tracked) == now + timedelta(seconds=20)


def test_next_due_counts_a_claims_lease(rig: Rig, clock: ManualClock) -> None:
    """A claimed row needs the engine again when its lease ends (if its worker died)."""
    driver = rig.driver(rig.model(Flow))
    now = clock.now()
    rig.insert(driver, {"id": 1, "state": "new", "state_changed": now, "state_next": now})
    (tracked,) = driver.tracked
    [(_obj, claimed)] = driver.claim(tracked, now, 1)
    assert driver.next_due(driver.tracked) == claimed.lease_until
    assert driver.next_due(driver.tracked, claimable_at=now) == claimed.lease_until


def test_next_due_of_several_models(rig: Rig, clock: ManualClock) -> None:
    driver = rig.driver(rig.model(Flow, table="orders"), rig.model(Flow, table="parcels"))
    first, second = driver.tracked
    now = clock.now()
    rig.insert(driver, {"id": 1, "state_changed": now, "state_next": now + timedelta(9)},
               tracked=first)
    rig.insert(driver, {"id": 1, "state_changed": now, "state_next": now + timedelta(3)},
               tracked=second)
    assert driver.next_due(driver.tracked) == now + timedelta(3)
    assert driver.next_due([first]) == now + timedelta(9)


def test_due_depth_counts_the_due_rows_and_how_late_the_oldest_is(
    rig: Rig, clock: ManualClock
) -> None:
    driver = rig.driver(rig.model(Flow))
    now = clock.now()
    assert driver.due_depth(driver.tracked, now) == {"orders": DueDepth(0, 0.0)}
    rig.insert(
        driver,
        *({"id": pk, "state": "new", "state_changed": now, "state_next": now + timedelta(
            seconds=late)} for pk, late in ((1, -30), (2, -10), (3, 0), (4, 10))),
        {"id": 5, "state": "held", "state_changed": now, "state_next": now - timedelta(60)},
    )
    assert driver.due_depth(driver.tracked, now) == {"orders": DueDepth(3, 30.0)}


def test_state_counts_count_rows_due_and_failing_per_state(
    rig: Rig, clock: ManualClock
) -> None:
    driver = rig.driver(rig.model(Flow))
    now = clock.now()
    rig.insert(
        driver,
        {"id": 1, "state": "new", "state_changed": now, "state_next": now - timedelta(5)},
        {"id": 2, "state": "new", "state_changed": now, "state_next": now + timedelta(5),
         "state_attempts": 2},
        {"id": 3, "state": "held", "state_changed": now, "state_next": None},
        {"id": 4, "state": "legacy", "state_changed": now, "state_next": None},
    )
    counts = {c.state: c for c in driver.state_counts(now)}
    assert set(counts) == {"new", "held", "legacy"}
    new = counts["new"]
    assert (new.model, new.rows, new.due, new.failing, new.known) == (
        "orders", 2, 1, 1, True)
    assert (counts["held"].rows, counts["held"].due) == (1, 0)
    assert (counts["legacy"].rows, counts["legacy"].known) == (1, False)
