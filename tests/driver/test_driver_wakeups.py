"""What a driver says it can do (its capability flags) and its wake-ups: LISTEN/NOTIFY on
PostgreSQL, the database file's commits on SQLite."""

from __future__ import annotations

import os

import pytest
from driver_rig import Flow, Rig


def test_the_capability_flags_follow_the_database(rig: Rig) -> None:
    driver = rig.driver(rig.model(Flow))
    assert driver.listen_notify is rig.postgresql
    assert driver.skip_locked is rig.postgresql
    assert driver.row_by_row_writes is not rig.postgresql
    assert isinstance(driver.one_statement_writes, bool)
    if rig.postgresql:
        assert driver.sqlite_path() is None
    else:
        path = driver.sqlite_path()
        assert path is not None and os.path.samefile(path, rig.sqlite_file)


def test_notifications_and_inserted_rows_reach_a_listener(rig: Rig) -> None:
    if not rig.postgresql:
        pytest.skip("SQLite has no NOTIFY: the listener watches the database file")
    driver = rig.driver(rig.model(Flow))
    with driver.listen_connection() as listener:
        listener.execute("LISTEN stator")
        driver.send_notification("probe")
        rig.insert(driver, {"id": 1})  # the wake-up trigger migrate installed
        heard = [n.payload for n in listener.notifies(timeout=10, stop_after=2)]
    assert heard == ["probe", "orders"]


def test_without_notify_a_notification_is_nothing(rig: Rig) -> None:
    if rig.postgresql:
        pytest.skip("PostgreSQL has NOTIFY")
    driver = rig.driver(rig.model(Flow))
    driver.send_notification("probe")  # neither an error nor a statement that fails later
    rig.insert(driver, {"id": 1})
    assert rig.row(driver, 1) is not None
