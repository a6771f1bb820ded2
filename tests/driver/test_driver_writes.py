"""``Driver.write`` / ``write_all``: every write after a claim is fenced by that claim.

A write (or a delete) applies only while the row still holds the claim's state and lease
(``state_next``); otherwise it is refused and its primary key reported lost, the row left
as the newer claim or the application left it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from driver_rig import Flow, Rig

from stator import ManualClock
from stator._policy import Claimed, Failed, Moved, Stayed, Write, after_run, move
from stator._store.interface import Driver


def claim_one(driver: Driver, clock: ManualClock) -> Claimed:
    (tracked,) = driver.tracked
    ((_obj, claimed),) = driver.claim(tracked, clock.now(), 1)
    return claimed


def claim_twice(driver: Driver, clock: ManualClock) -> tuple[Claimed, Claimed]:
    """Claim the one due row, let that lease run out, claim it again."""
    first = claim_one(driver, clock)
    clock.set(first.lease_until + timedelta(seconds=1))
    second = claim_one(driver, clock)
    assert second.lease_until > first.lease_until
    return first, second


def test_a_write_under_its_claim_is_applied(rig: Rig, clock: ManualClock) -> None:
    driver = rig.driver(rig.model(Flow, history=True))
    rig.insert(driver, {"id": 1}, {"id": 2})
    (tracked,) = driver.tracked
    claims = {c.pk: c for _o, c in driver.claim(tracked, clock.now(), 2)}
    clock.advance(5)
    moved = after_run(Flow, claims[1], Moved(Flow.held), clock.now())
    stayed = after_run(Flow, claims[2], Stayed(), clock.now())
    assert driver.write_all([(tracked, [moved, stayed])]) == {tracked.name: set()}
    one, two = rig.row(driver, 1), rig.row(driver, 2)
    assert one is not None and two is not None
    assert (one["state"], one["state_changed"], one["state_next"]) == ("held", clock.now(), None)
    assert [entry[0] for entry in one["state_history"]] == ["held"]
    assert (two["state"], two["state_attempts"]) == ("new", 0)
    assert two["state_next"] == clock.now() + timedelta(seconds=30)


def test_a_write_under_an_expired_lease_is_refused(rig: Rig, clock: ManualClock) -> None:
    """A worker whose lease ran out, and whose row was claimed again, cannot overwrite it."""
    driver = rig.driver(rig.model(Flow))
    rig.insert(driver, {"id": 1})
    (tracked,) = driver.tracked
    first, second = claim_twice(driver, clock)
    stale = move(first, Flow.held, clock.now())
    assert driver.write(tracked, [stale]) == {1}
    row = rig.row(driver, 1)
    assert row is not None and (row["state"], row["state_next"]) == ("new", second.lease_until)
    current = move(second, Flow.held, clock.now())
    assert driver.write_all([(tracked, [current])]) == {tracked.name: set()}
    assert (rig.row(driver, 1) or {})["state"] == "held"


def test_a_delete_under_an_expired_lease_is_refused(rig: Rig, clock: ManualClock) -> None:
    driver = rig.driver(rig.model(Flow))
    rig.insert(driver, {"id": 1})
    (tracked,) = driver.tracked
    first, second = claim_twice(driver, clock)
    assert driver.write(tracked, [Write(first.pk, first.state, first.lease_until,
                                        delete=True)]) == {1}
    assert rig.row(driver, 1) is not None
    assert driver.write(tracked, [Write(second.pk, second.state, second.lease_until,
                                        delete=True)]) == set()
    assert rig.row(driver, 1) is None


def test_a_write_after_the_application_moved_the_row_is_refused(
    rig: Rig, clock: ManualClock
) -> None:
    """Same lease, other state: the fence compares the state too."""
    driver = rig.driver(rig.model(Flow))
    rig.insert(driver, {"id": 1}, {"id": 2})
    (tracked,) = driver.tracked
    claims = {c.pk: c for _o, c in driver.claim(tracked, clock.now(), 2)}
    for pk in (1, 2):  # behind the engine's back, keeping state_next as the claim left it
        rig.update(driver, pk, state="held")
    writes = [move(claims[1], Flow.done, clock.now()),
              Write(2, "new", claims[2].lease_until, delete=True)]
    assert driver.write_all([(tracked, writes)]) == {tracked.name: {1, 2}}
    assert [(rig.row(driver, pk) or {}).get("state") for pk in (1, 2)] == ["held", "held"]


def test_a_batch_applies_the_writes_whose_fence_holds_and_reports_the_rest(
    rig: Rig, clock: ManualClock
) -> None:
    driver = rig.driver(rig.model(Flow))
    rig.insert(driver, *({"id": pk} for pk in (1, 2, 3)))
    (tracked,) = driver.tracked
    claims = {c.pk: c for _o, c in driver.claim(tracked, clock.now(), 3)}
    rig.update(driver, 2, state="held")
    writes = [move(claims[pk], Flow.done, clock.now()) for pk in (1, 2, 3)]
    assert driver.write_all([(tracked, writes)]) == {tracked.name: {2}}
    assert [(rig.row(driver, pk) or {}).get("state") for pk in (1, 2, 3)] == [
        "done", "held", "done"]


def test_several_models_are_written_in_one_go(rig: Rig, clock: ManualClock) -> None:
    orders = rig.model(Flow, table="orders")
    parcels = rig.model(Flow, table="parcels")
    driver = rig.driver(orders, parcels)
    first, second = driver.tracked
    rig.insert(driver, {"id": 1}, tracked=first)
    rig.insert(driver, {"id": 1}, tracked=second)
    [(_o, a)] = driver.claim(first, clock.now(), 5)
    [(_o, b)] = driver.claim(second, clock.now(), 5)
    groups: list[tuple[Any, list[Write]]] = [
        (first, [move(a, Flow.held, clock.now())]),
        (second, [Write(b.pk, b.state, b.lease_until, delete=True)]),
    ]
    assert driver.write_all(groups) == {"orders": set(), "parcels": set()}
    assert (rig.row(driver, 1, first) or {})["state"] == "held"
    assert rig.row(driver, 1, second) is None


def test_a_failure_is_written_with_its_record(rig: Rig, clock: ManualClock) -> None:
    """The row's attempts and backoff, and the failure in ``recent_errors``, in one write."""
    driver = rig.driver(rig.model(Flow))
    rig.insert(driver, {"id": 1})
    (tracked,) = driver.tracked
    claimed = claim_one(driver, clock)
    failure = Failed("error", "RuntimeError: boom", "Traceback: ...")
    write = after_run(Flow, claimed, failure, clock.now())
    assert driver.write(tracked, [write], worker_id="w-1") == set()
    row = rig.row(driver, 1)
    assert row is not None and (row["state"], row["state_attempts"]) == ("new", 1)
    assert row["state_next"] == write.state_next
    (error,) = driver.recent_errors()
    assert (error.model, error.row_pk, error.state, error.attempt) == (
        "orders", "1", "new", 1)
    assert (error.kind, error.message, error.worker_id) == (
        "error", "RuntimeError: boom", "w-1")
    assert error.traceback == "Traceback: ..."


def test_a_refused_failure_leaves_no_record(rig: Rig, clock: ManualClock) -> None:
    driver = rig.driver(rig.model(Flow))
    rig.insert(driver, {"id": 1})
    (tracked,) = driver.tracked
    first, _second = claim_twice(driver, clock)
    late = after_run(Flow, first, Failed("error", "RuntimeError: late"), clock.now())
    assert driver.write(tracked, [late]) == {1}
    assert driver.recent_errors() == []
    assert (rig.row(driver, 1) or {})["state_attempts"] == 0
