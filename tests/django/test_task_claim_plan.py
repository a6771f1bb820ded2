"""The SQLite claim of ``django.tasks`` rows reads the ready state down the claim index
(``stator_tasks_claim``: state, -priority, state_next) and stops at ``:limit`` due rows,
rather than range-scanning every due task and sorting them all (issue 23: a claim then cost
the whole backlog).  Checked on the plan SQLite chooses, not on a timing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytest.importorskip("django.tasks", reason="the task backend needs Django >= 6.0")

from django.db import connections

from stator.django._setup import build_stator
from stator.django._task_model import StatorTask

pytestmark = pytest.mark.django_db(transaction=True, databases=["default"])


def test_the_ready_states_claim_follows_the_priority_index() -> None:
    stator = build_stator(models=[StatorTask], alias="default", options={})
    (tracked,) = stator.store.tracked
    assert tracked.sql.claim is not None
    params = stator.store.ops.claim_params(tracked, datetime.now(UTC), 100)
    with connections["default"].cursor() as cursor:
        raw = cursor.connection  # sqlite3: named parameters as the statement spells them
        plan = raw.execute(
            f"EXPLAIN QUERY PLAN {tracked.sql.claim}", params).fetchall()
    lines = [str(row[-1]) for row in plan]
    # The ready state's branch (b0: the first scheduled state), from its start to its scan.
    branch = lines[lines.index("CO-ROUTINE b0") + 1:lines.index("SCAN b0")]
    searches = [line for line in branch if line.startswith("SEARCH stator_tasks ")]
    assert searches == ["SEARCH stator_tasks USING INDEX stator_tasks_claim (state=?)"], lines
    assert not [line for line in branch if "TEMP B-TREE" in line], lines  # nothing sorted
