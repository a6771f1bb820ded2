"""``migrate`` and ``problems``, and names that need quoting through every operation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from driver_rig import Flow, Rig
from sqlalchemy import text

from stator import ManualClock
from stator._policy import Write, move
from stator._store.interface import Driver, DueDepth
from stator.errors import SchemaError


def run_sql(driver: Driver, sql: str) -> None:
    with driver.engine.begin() as conn:
        conn.execute(text(sql))


def test_a_migrated_database_has_no_problems_and_migrating_again_does_nothing(
    rig: Rig,
) -> None:
    driver = rig.driver(rig.model(Flow))
    assert driver.problems() == []
    driver.check_ready()
    assert driver.migrate() == []


def test_a_database_without_stators_tables_is_reported_with_the_fix(rig: Rig) -> None:
    driver = rig.driver(rig.model(Flow), migrate=False)
    run_sql(driver, "CREATE TABLE unrelated (id INTEGER PRIMARY KEY)")  # the database exists
    assert driver.problems() == [f"the database has no Stator tables: {driver.migrate_hint}"]
    with pytest.raises(SchemaError, match="no Stator tables"):
        driver.check_ready()


def test_a_missing_table_and_missing_columns_are_reported(rig: Rig) -> None:
    rig.driver(rig.model(Flow, table="orders"))  # Stator's tables exist
    parcels = rig.driver(rig.model(Flow, table="parcels"), rig.model(Flow, table="boxes"),
                         migrate=False)
    run_sql(parcels, "CREATE TABLE parcels (id INTEGER PRIMARY KEY, state VARCHAR(100))")
    hint = parcels.migrate_hint
    assert parcels.problems() == [
        f"table parcels lacks Stator column(s) state_changed, state_next, state_attempts: "
        f"{hint}",
        f"table boxes does not exist: {hint}",
    ]
    with pytest.raises(SchemaError, match="lacks Stator column"):
        parcels.check_ready()


@pytest.mark.parametrize("table", ["order", "Orders"])
def test_names_that_need_quotes_go_through_every_operation(
    rig: Rig, clock: ManualClock, table: str
) -> None:
    """A reserved word (``order``) on both databases, a mixed-case name (``Orders``) on
    PostgreSQL, where unquoted names fold to lower case; the columns ``group`` and ``order``
    (the claim priority) are reserved words too."""
    if table == "Orders" and not rig.postgresql:
        pytest.skip("SQLite compares names case-insensitively: only PostgreSQL folds them")
    driver = rig.driver(rig.model(Flow, table=table, priority=True, history=True))
    assert driver.problems() == []
    (tracked,) = driver.tracked
    now = clock.now()
    rig.insert(driver, {"id": 1, "group": "a", "order": 1}, {"id": 2, "group": "b", "order": 2})
    assert driver.due_depth(driver.tracked, now)[table].rows == 2
    claims = [c for _obj, c in driver.claim(tracked, now, 1) + driver.claim(tracked, now, 1)]
    assert [c.pk for c in claims] == [2, 1]  # by priority
    assert driver.next_due(driver.tracked) == claims[0].lease_until
    moved, dropped = move(claims[0], Flow.held, now), Write(1, "new", claims[1].lease_until,
                                                           delete=True)
    assert driver.write_all([(tracked, [moved, dropped])]) == {table: set()}
    row = rig.row(driver, 2)
    assert row is not None and (row["state"], row["group"]) == ("held", "b")
    assert [entry[0] for entry in row["state_history"]] == ["held"]
    assert rig.row(driver, 1) is None
    assert {c.state: c.rows for c in driver.state_counts(now)} == {"held": 1}
    assert driver.due_depth(driver.tracked, now + timedelta(1)) == {table: DueDepth(0, 0.0)}
    assert driver.migrate() == []  # idempotent: its triggers found again under their names
