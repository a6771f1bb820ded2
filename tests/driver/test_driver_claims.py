"""``Driver.claim``: which rows a claim takes, how it leases them, and what it passes by."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from driver_rig import Flow, Rig
from sqlalchemy import text

from stator import ManualClock
from stator._store._unreadable import SET_ASIDE
from stator._types import UTCDateTime


def test_a_claim_takes_the_due_rows_and_leases_them(rig: Rig, clock: ManualClock) -> None:
    driver = rig.driver(rig.model(Flow))
    now = clock.now()
    rig.insert(
        driver,
        {"id": 1, "state": "new", "state_changed": now, "state_next": now},
        {"id": 2, "state": "new", "state_changed": now, "state_next": now - timedelta(1)},
        {"id": 3, "state": "new", "state_changed": now, "state_next": now + timedelta(1)},
        {"id": 4, "state": "done", "state_changed": now, "state_next": None},
    )
    (tracked,) = driver.tracked
    claimed = driver.claim(tracked, now, 10)
    lease = now + timedelta(seconds=Flow.new.lease)
    assert sorted(c.pk for _obj, c in claimed) == [1, 2]
    for obj, c in claimed:
        assert (obj.id, c.state, c.attempts, c.state_changed) == (c.pk, "new", 0, now)
        assert c.lease_until == lease
        row = rig.row(driver, c.pk)
        assert row is not None and row["state_next"] == lease  # the lease is the fence
    assert driver.claim(tracked, now, 10) == []


def test_a_claim_takes_no_more_than_its_limit_the_longest_due_first(
    rig: Rig, clock: ManualClock
) -> None:
    driver = rig.driver(rig.model(Flow))
    now = clock.now()
    rig.insert(driver, *({"id": pk, "state": "new", "state_changed": now,
                          "state_next": now - timedelta(seconds=pk)} for pk in range(1, 6)))
    (tracked,) = driver.tracked
    assert driver.claim(tracked, now, 0) == []
    assert [c.pk for _o, c in driver.claim(tracked, now, 2)] in ([5, 4], [4, 5])
    assert sorted(c.pk for _o, c in driver.claim(tracked, now, 2)) == [2, 3]
    assert [c.pk for _o, c in driver.claim(tracked, now, 2)] == [1]


def test_a_claim_shares_its_limit_between_states_oldest_first_in_each(
    rig: Rig, clock: ManualClock
) -> None:
    """Round robin between states (each state's oldest due row, then each one's second…),
    however each state's rows are ranked (``SqlDialect.rank_in_branches``)."""
    driver = rig.driver(rig.model(Flow))
    now = clock.now()
    hour_ago = now - timedelta(hours=1)

    def rows(state: str, keys: range) -> list[dict[str, Any]]:
        return [{"id": pk, "state": state, "state_changed": hour_ago,
                 "state_next": now - timedelta(seconds=pk % 10)} for pk in keys]

    rig.insert(driver, *rows("new", range(1, 7)), *rows("done", range(11, 14)))
    (tracked,) = driver.tracked
    assert sorted(c.pk for _o, c in driver.claim(tracked, now, 4)) == [5, 6, 12, 13]
    # "done" has one due row left, "new" four: the rest of the limit goes to "new".
    assert sorted(c.pk for _o, c in driver.claim(tracked, now, 4)) == [2, 3, 4, 11]


def test_a_claimed_row_is_not_claimed_again_until_its_lease_ends(
    rig: Rig, clock: ManualClock
) -> None:
    driver = rig.driver(rig.model(Flow))
    rig.insert(driver, {"id": 1})
    (tracked,) = driver.tracked
    [(_obj, first)] = driver.claim(tracked, clock.now(), 10)
    clock.set(first.lease_until - timedelta(seconds=1))
    assert driver.claim(tracked, clock.now(), 10) == []
    clock.set(first.lease_until)
    [(_obj, second)] = driver.claim(tracked, clock.now(), 10)
    assert second.lease_until > first.lease_until


def test_rows_inserted_with_the_columns_defaults_are_claimed(
    rig: Rig, clock: ManualClock
) -> None:
    """The database's defaults put a new row in the initial state, due at once."""
    driver = rig.driver(rig.model(Flow))
    rig.insert(driver, {"id": 1}, {"id": 2, "group": "g"})
    (tracked,) = driver.tracked
    claimed = driver.claim(tracked, clock.now(), 10)
    assert {c.pk: (obj.group, c.state) for obj, c in claimed} == {1: (None, "new"), 2: ("g", "new")}


def test_claims_take_the_highest_priority_first(rig: Rig, clock: ManualClock) -> None:
    """``stator_claim_priority`` names the column (here ``order``, a reserved word)."""
    driver = rig.driver(rig.model(Flow, priority=True))
    now = clock.now()
    ranks = {1: 1, 2: 5, 3: 0, 4: 5, 5: 3}
    rig.insert(driver, *({"id": pk, "order": rank, "state": "new", "state_changed": now,
                          "state_next": now - timedelta(seconds=10 - pk)}
                         for pk, rank in ranks.items()))
    (tracked,) = driver.tracked
    assert sorted(ranks[c.pk] for _o, c in driver.claim(tracked, now, 3)) == [3, 5, 5]
    assert sorted(ranks[c.pk] for _o, c in driver.claim(tracked, now, 3)) == [0, 1]


def test_a_claim_passes_by_rows_another_transaction_holds(rig: Rig, clock: ManualClock) -> None:
    if not rig.postgresql:
        pytest.skip("SQLite has one writer at a time: there is no row lock to pass by")
    driver = rig.driver(rig.model(Flow))
    assert driver.skip_locked
    rig.insert(driver, {"id": 1}, {"id": 2}, {"id": 3})
    (tracked,) = driver.tracked
    with rig.other_connection() as other, other.transaction():  # another worker, mid-claim
        other.execute(f"SELECT 1 FROM {tracked.quoted_table} WHERE id = 1 FOR UPDATE")
        claimed = driver.claim(tracked, clock.now(), 3)
        assert sorted(c.pk for _obj, c in claimed) == [2, 3]
        # ... and an idle check leaves it out too: it is not this worker's to wait for.
        assert driver.next_due([tracked], claimable_at=clock.now()) == claimed[0][1].lease_until
    assert [c.pk for _obj, c in driver.claim(tracked, clock.now(), 3)] == [1]


@pytest.mark.parametrize(("due_new", "due_done"), [(40, 40), (40, 2)])
def test_a_claim_of_several_states_locks_only_the_rows_it_takes(
    rig: Rig, clock: ManualClock, due_new: int, due_done: int
) -> None:
    """Each state locks its fair share of the batch, not a whole batch: locking :limit rows
    per state and keeping :limit of them all cost about a third of a transition's database
    CPU (three states)."""
    if not rig.postgresql:
        pytest.skip("SQLite has one writer at a time: a claim locks no rows")
    driver = rig.driver(rig.model(Flow))
    now = clock.now()
    rows = [{"id": pk, "state": "new", "state_changed": now,
             "state_next": now - timedelta(seconds=pk)} for pk in range(1, due_new + 1)]
    rows += [{"id": 1000 + pk, "state": "done", "state_changed": now,
              "state_next": now - timedelta(seconds=pk)} for pk in range(1, due_done + 1)]
    rig.insert(driver, *rows)
    (tracked,) = driver.tracked
    assert len(tracked.graph.scheduled_states()) == 2
    table, sql = tracked.quoted_table, tracked.sql.claim
    assert sql is not None
    params = driver.ops.claim_params(tracked, now, 10)  # type: ignore[attr-defined]
    with driver.engine.connect() as conn, conn.begin():  # the claim's locks held
        taken = conn.execute(text(sql), params).all()
        with rig.other_connection() as other:
            free = other.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM {table} FOR UPDATE SKIP LOCKED) AS f"
            ).fetchone()[0]
        conn.rollback()
    assert len(taken) == 10
    assert due_new + due_done - free == 10  # locked: exactly the rows taken


def test_a_claim_waits_for_sqlites_one_writer_then_takes_every_row(
    rig: Rig, clock: ManualClock
) -> None:
    if rig.postgresql:
        pytest.skip("PostgreSQL locks rows, not the database (see the skip-locked test)")
    driver = rig.driver(rig.model(Flow))
    assert not driver.skip_locked
    rig.insert(driver, {"id": 1}, {"id": 2})
    (tracked,) = driver.tracked
    other = rig.other_connection()
    other.execute("BEGIN IMMEDIATE")  # another process writing
    got: list[Any] = []

    def claim() -> None:
        try:
            got.append(driver.claim(tracked, clock.now(), 5))
        finally:
            driver.thread_done()

    claimer = threading.Thread(target=claim)
    claimer.start()
    time.sleep(0.3)
    assert got == []  # queued on the writer's lock, not failed nor skipped
    other.execute("COMMIT")
    other.close()
    claimer.join(30)
    assert sorted(c.pk for _obj, c in got[0]) == [1, 2]


def test_a_claim_that_finds_sqlite_busy_raises_sqlalchemys_error(
    rig: Rig, clock: ManualClock
) -> None:
    """The claim's ``BEGIN IMMEDIATE`` (on the DB-API cursor) fails past the busy timeout
    as SQLAlchemy's ``OperationalError``: the worker's retry policy takes only those."""
    if rig.postgresql:
        pytest.skip("PostgreSQL locks rows, not the database")
    from sqlalchemy import event
    from sqlalchemy.exc import OperationalError

    driver = rig.driver(rig.model(Flow))
    rig.insert(driver, {"id": 1})
    (tracked,) = driver.tracked

    @event.listens_for(driver.engine, "connect")
    def _impatient(dbapi: Any, _record: Any) -> None:
        dbapi.execute("PRAGMA busy_timeout = 50")

    driver.engine.dispose()  # new connections, with the short timeout
    other = rig.other_connection()
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(OperationalError, match="locked"):
            driver.claim(tracked, clock.now(), 5)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert [c.pk for _obj, c in driver.claim(tracked, clock.now(), 5)] == [1]


def test_a_claim_the_database_refuses_raises_sqlalchemys_error(
    rig: Rig, clock: ManualClock
) -> None:
    """A claim statement the database refuses (on the DB-API cursor, ``_raw_claim``) is
    raised as SQLAlchemy's error, which the worker's judgement of errors reads."""
    from sqlalchemy.exc import DBAPIError

    driver = rig.driver(rig.model(Flow))
    (tracked,) = driver.tracked
    other = rig.other_connection()
    other.execute(f"DROP TABLE {tracked.table.name}")
    other.close()
    with pytest.raises(DBAPIError, match=r"no such table|does not exist"):
        driver.claim(tracked, clock.now(), 5)


def test_a_claim_whose_connection_was_lost_says_so_and_the_next_claim_reconnects(
    rig: Rig, clock: ManualClock
) -> None:
    """The server ends the claim's connection while it is lent to the claim: the claim
    fails as SQLAlchemy's error saying the connection is lost (what the worker's outage
    handling reads, ``_db_errors.connection_lost``), and the next claim runs on a new one."""
    if not rig.postgresql or rig.kind != "sqlalchemy":
        pytest.skip("the SQLAlchemy driver's claim on psycopg's cursor")
    from sqlalchemy.exc import DBAPIError

    from stator._db_errors import connection_lost

    driver: Any = rig.driver(rig.model(Flow))
    (tracked,) = driver.tracked
    now = clock.now()
    rig.insert(driver, {"id": 1, "state": "new", "state_changed": now, "state_next": now})
    raw = driver._loader(tracked).raw
    assert raw is not None
    with driver.engine.connect() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
        other = rig.other_connection()
        other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        other.close()
        with pytest.raises(DBAPIError) as failed:
            raw.fetch(conn, driver.ops.claim_params(tracked, now, 5))
    assert connection_lost(failed.value)
    assert [c.pk for _obj, c in driver.claim(tracked, now, 5)] == [1]


# A value a row cannot be read with, per database (valid to the database, not to Python).
GARBAGE = {"sqlite": [("state_changed", "'garbage'"), ("state_attempts", "'abc'")],
           "postgresql": [("state_changed", "'infinity'"), ("state_changed", "'20000-01-01'")]}


@pytest.mark.parametrize("case", [0, 1])
def test_a_row_the_claim_cannot_read_is_recorded_and_set_aside(
    rig: Rig, clock: ManualClock, case: int
) -> None:
    """The claim returns the readable rows; the other is recorded as an error, gets one
    more attempt and is due again only after ``SET_ASIDE``."""
    driver = rig.driver(rig.model(Flow))
    rig.insert(driver, {"id": 1}, {"id": 2}, {"id": 3})
    column, value = GARBAGE[rig.database][case]
    (tracked,) = driver.tracked
    with driver.engine.begin() as conn:
        conn.execute(text(f"UPDATE {tracked.quoted_table} SET {column} = {value} WHERE id = 2"))
    claimed = driver.claim(tracked, clock.now(), 5)
    assert sorted(c.pk for _obj, c in claimed) == [1, 3]
    (error,) = driver.recent_errors()
    assert (error.row_pk, error.kind, error.attempt) == ("2", "unreadable", 1)
    assert column in error.message
    with driver.engine.connect() as conn:
        attempts, due = conn.execute(text(
            f"SELECT state_attempts, state_next FROM {tracked.quoted_table} WHERE id = 2")).one()
        assert UTCDateTime().process_result_value(due, conn.dialect) == clock.now() + SET_ASIDE
        conn.rollback()
    assert attempts == 1
    assert driver.claim(tracked, clock.now(), 5) == []


def test_a_claims_update_finds_the_picked_rows_by_key_not_by_a_scan(
    rig: Rig, clock: ManualClock
) -> None:
    """The claim's ``UPDATE`` reaches the rows it picked through the primary key
    (``SqlDialect.picked_rows``).  Spelt ``IN (SELECT … FROM picked)``, PostgreSQL joined
    the picks to a sequential scan of the whole table, on every claim: most of a claim's
    database CPU on the bench's 20,000 rows, more as the table grows."""
    if not rig.postgresql:
        pytest.skip("SQLite's plan looks each picked row up by key already")
    driver = rig.driver(rig.model(Flow))
    now = clock.now()
    rig.insert(driver, *({"id": pk, "state": "new", "state_changed": now,
                          "state_next": now - timedelta(seconds=pk)} for pk in range(1, 5001)))
    (tracked,) = driver.tracked
    table, sql = tracked.quoted_table, tracked.sql.claim
    assert sql is not None
    params = driver.ops.claim_params(tracked, now, 100)  # type: ignore[attr-defined]
    with driver.engine.connect() as conn:
        conn.execute(text(f"ANALYZE {table}"))
        plan = [line for (line,) in conn.execute(text(f"EXPLAIN {sql}"), params)]
        conn.rollback()
    assert not [line for line in plan if "Seq Scan" in line], "\n".join(plan)
