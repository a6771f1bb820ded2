"""The model hooks a driver honours in its claim and its write, which the django.tasks
backend is built on: ``stator_write_columns`` and ``stator_write_extra`` (the handler's
results, written by the fenced write itself or in its transaction, only where the fence
held), ``stator_lease_column`` (the claim copies its lease there) and
``stator_claim_stamps`` (the claim stamps the rows it takes up for a handler); and
``load_one``, a row loaded as a claim loads it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from driver_rig import Flow, Rig
from sqlalchemy import Connection, text

from stator import ManualClock
from stator._policy import Moved, Stayed, after_run
from stator._store.interface import Driver


def write_results(cls: Any, store: Driver, conn: Connection, writes: Sequence[Any]) -> None:
    """``stator_write_extra``: each write's ``extra`` into the row's ``result``."""
    tracked = next(t for t in store.tracked if t.model is cls)
    for write in writes:
        conn.execute(text(f"UPDATE {tracked.quoted_table} SET result = :result WHERE id = :id"),
                     {"result": write.extra, "id": write.pk})


def test_extra_is_written_with_the_fenced_write_and_only_where_the_fence_held(
    rig: Rig, clock: ManualClock
) -> None:
    model = rig.model(Flow, texts=("result",),
                      hooks={"stator_write_extra": classmethod(write_results)})
    driver = rig.driver(model)
    (tracked,) = driver.tracked
    rig.insert(driver, {"id": 1})
    [(_o, slow)] = driver.claim(tracked, clock.now(), 5)
    clock.set(slow.lease_until + timedelta(seconds=1))
    rig.insert(driver, {"id": 2, "state_changed": clock.now(), "state_next": clock.now()})
    claims = {c.pk: c for _o, c in driver.claim(tracked, clock.now(), 5)}
    assert sorted(claims) == [1, 2]  # row 1 again: the slow claim's lease ran out

    late = replace(after_run(Flow, slow, Moved(Flow.held), clock.now()), extra="late")
    on_time = replace(after_run(Flow, claims[2], Moved(Flow.held), clock.now()), extra="2")
    assert driver.write_all([(tracked, [late, on_time])]) == {tracked.name: {1}}
    assert [(rig.row(driver, pk) or {}).get("result") for pk in (1, 2)] == [None, "2"]
    current = replace(after_run(Flow, claims[1], Moved(Flow.held), clock.now()), extra="1")
    assert driver.write(tracked, [current]) == set()
    assert (rig.row(driver, 1) or {}).get("result") == "1"


@pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
def test_write_columns_are_set_by_the_fenced_write_and_only_where_the_fence_held(
    rig: Rig, clock: ManualClock, history: bool
) -> None:
    """``stator_write_columns``: a write's ``extra`` sets those columns in the fenced write
    itself, so a write whose lease was lost sets none of them; a write without ``extra`` in
    the same batch leaves them as they are (with a history: SQLite's numbered placeholders)."""
    model = rig.model(Flow, history=history, times=("finished",), texts=("result", "note"),
                      hooks={"stator_write_columns": {
                          "result": "value", "finished": "time", "note": "json"}})
    driver = rig.driver(model)
    (tracked,) = driver.tracked
    rig.insert(driver, {"id": 1})
    [(_o, slow)] = driver.claim(tracked, clock.now(), 5)
    clock.set(slow.lease_until + timedelta(seconds=1))
    now = clock.now()
    rig.insert(driver, *({"id": pk, "state_changed": now, "state_next": now, "result": "kept"}
                         for pk in (2, 3)))
    claims = {c.pk: c for _o, c in driver.claim(tracked, now, 5)}
    assert sorted(claims) == [1, 2, 3]  # row 1 again: the slow claim's lease ran out

    def done(claimed: Any, result: str) -> Any:
        extra = {"result": result, "finished": now, "note": ["done", result]}
        return replace(after_run(Flow, claimed, Moved(Flow.held), now), extra=extra)

    late, on_time = done(slow, "late"), done(claims[2], "2")
    plain = after_run(Flow, claims[3], Moved(Flow.held), now)  # no extra: columns untouched
    assert driver.write_all([(tracked, [late, on_time, plain])]) == {tracked.name: {1}}
    rows = [rig.row(driver, pk) or {} for pk in (1, 2, 3)]
    assert [(r["state"], r["result"], r["finished"], r["note"]) for r in rows] == [
        ("new", None, None, None),
        ("held", "2", now, '["done", "2"]'),
        ("held", "kept", None, None),
    ]
    assert driver.write(tracked, [done(claims[1], "1")]) == set()
    row = rig.row(driver, 1) or {}
    assert (row["state"], row["result"], row["finished"]) == ("held", "1", now)


def test_the_claim_copies_its_lease_into_the_lease_column(rig: Rig, clock: ManualClock) -> None:
    """While the row is held its lease column equals ``state_next``; the write that ends
    the attempt moves ``state_next`` away from it."""
    model = rig.model(Flow, times=("held_until",),
                      hooks={"stator_lease_column": "held_until"})
    driver = rig.driver(model)
    (tracked,) = driver.tracked
    rig.insert(driver, {"id": 1})
    [(obj, claimed)] = driver.claim(tracked, clock.now(), 1)
    row = rig.row(driver, 1) or {}
    assert row["held_until"] == row["state_next"] == claimed.lease_until
    assert obj.held_until == claimed.lease_until  # as the handler sees its row
    driver.write(tracked, [after_run(Flow, claimed, Stayed(), clock.now())])
    row = rig.row(driver, 1) or {}
    assert row["held_until"] == claimed.lease_until != row["state_next"]


def test_the_claim_stamps_the_rows_it_takes_up_for_a_handler(
    rig: Rig, clock: ManualClock
) -> None:
    """"first" keeps the first attempt's time, "each" moves with every attempt; a row claimed
    for its deletion (no handler) is not stamped."""
    model = rig.model(Flow, times=("first_at", "last_at"), hooks={
        "stator_claim_stamps": {"first_at": "first", "last_at": "each"}})
    driver = rig.driver(model)
    (tracked,) = driver.tracked
    start = clock.now()
    rig.insert(driver, {"id": 1},
               {"id": 2, "state": "done", "state_changed": start - timedelta(seconds=61),
                "state_next": start})
    claims = {c.pk: (obj, c) for obj, c in driver.claim(tracked, start, 5)}
    assert (claims[1][0].first_at, claims[1][0].last_at) == (start, start)
    assert [(rig.row(driver, 2) or {}).get(c) for c in ("first_at", "last_at")] == [None, None]

    again = clock.advance(5)
    driver.write(tracked, [after_run(Flow, claims[1][1], Stayed(0), again)])
    [(obj, _claimed)] = driver.claim(tracked, again, 5)
    assert (obj.first_at, obj.last_at) == (start, again)
    row = rig.row(driver, 1) or {}
    assert (row["first_at"], row["last_at"]) == (start, again)


def test_load_one_loads_a_row_as_a_claim_does(rig: Rig, clock: ManualClock) -> None:
    driver = rig.driver(rig.model(Flow))
    (tracked,) = driver.tracked
    now = clock.now()
    rig.insert(driver, {"id": 7, "group": "g", "state_changed": now, "state_next": now,
                        "state_attempts": 2})
    with driver.engine.connect() as conn:
        obj, claimed = driver.load_one(conn, tracked, 7)
        conn.rollback()
    assert (obj.id, obj.group) == (7, "g")
    assert (claimed.pk, claimed.state, claimed.state_changed, claimed.lease_until,
            claimed.attempts) == (7, "new", now, now, 2)
