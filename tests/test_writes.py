"""The one "did the handler write?" test on SQL text (Django handler scopes, task savepoints)."""

from __future__ import annotations

import pytest

from stator._store._writes import writes


@pytest.mark.parametrize("sql", [
    "INSERT INTO t VALUES (1)", "  update t SET a = 1", "DELETE FROM t", "REPLACE INTO t (a)",
    'SAVEPOINT "s1"', "CREATE TABLE t (a int)", "DROP TABLE t", "ALTER TABLE t ADD b int",
    "\n\tInsert into t values (2)",
])
def test_statements_that_change_something_write(sql: str) -> None:
    assert writes(sql)


@pytest.mark.parametrize("sql", [
    "SELECT 1", "SELECT * FROM t FOR UPDATE", "  with x AS (SELECT 1) SELECT * FROM x", "",
    "RELEASE SAVEPOINT s1", "PRAGMA journal_mode",
])
def test_reads_do_not_write(sql: str) -> None:
    assert not writes(sql)
