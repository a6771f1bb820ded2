"""``OPTIONS["TASK_LIMITS"]`` of the ``django.tasks`` backend, on SQLite ("default") and
PostgreSQL ("pg"): at most N running tasks of a task path across every worker and queue,
and, for a task also under its queue's ``QUEUE_LIMITS``, both at once (``QUEUE_LIMITS``
alone: ``test_tasks.py``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the task backend needs Django >= 6.0")

import tasks_jobs
from django.core.exceptions import ImproperlyConfigured
from django.tasks import TaskResultStatus
from task_settings import stator_tasks as settings

from stator import ManualClock, Stator
from stator.django._setup import build_stator
from stator.django._task_model import StatorTask

SHOUT, ADD = tasks_jobs.shout.module_path, tasks_jobs.add.module_path

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "pg"]),
    pytest.mark.parametrize("alias", ["default", "pg"]),
]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC) + timedelta(seconds=1))


def engine(alias: str, clock: ManualClock) -> Stator:
    return build_stator(models=[StatorTask], clock=clock, alias=alias, options={})


def claim(stator: Stator, clock: ManualClock) -> set[str]:
    (tracked,) = stator.store.tracked
    return {c.pk for _o, c in stator.store.claim(tracked, clock.now(), 10)}


def finish(stator: Stator, clock: ManualClock, results: list[Any]) -> None:
    """The workers holding tasks died: their leases run out, and every task runs."""
    clock.advance(StatorTask.state_graph.ready.lease)
    for _ in range(8):
        stator.run_once()
    for result in results:
        assert result.task.get_result(result.id).status == TaskResultStatus.SUCCESSFUL


def test_task_limits_bound_the_running_tasks_of_a_task(alias: str, clock: ManualClock) -> None:
    with settings(alias, TASK_LIMITS={ADD: 1}):
        added = [tasks_jobs.add.enqueue(i, 1) for i in range(3)]
        mail = [tasks_jobs.shout.enqueue(str(i)) for i in range(2)]
        stator = engine(alias, clock)
        (tracked,) = stator.store.tracked
        assert tracked.limits["ready"][0] == {ADD: 1}
        first = claim(stator, clock)
        assert len(first & {r.id for r in added}) == 1 and {r.id for r in mail} <= first
        assert len(first) == 3
        assert claim(stator, clock) == set()  # add's room is taken
        finish(stator, clock, added + mail)


def test_a_task_under_both_limits_runs_only_while_both_have_room(
    alias: str, clock: ManualClock
) -> None:
    """``mail`` runs two at once, ``shout`` one at once: a second ``shout`` waits though
    ``mail`` has room (and comes first: a higher priority), and an ``add`` sent to ``mail``
    takes that room instead."""
    with settings(alias, QUEUE_LIMITS={"mail": 2}, TASK_LIMITS={SHOUT: 1}):
        shouts = [tasks_jobs.shout.using(priority=10).enqueue(str(i)) for i in range(3)]
        mailed = [tasks_jobs.add.using(queue_name="mail").enqueue(i, 1) for i in range(2)]
        other = tasks_jobs.add.enqueue(9, 1)
        stator = engine(alias, clock)
        (tracked,) = stator.store.tracked
        assert (tracked.limits["ready"][0], tracked.also_limits["ready"][0][0]) == (
            {"mail": 2}, {SHOUT: 1})
        names = {r.id: name for name, rs in (("shout", shouts), ("mailed", mailed),
                                             ("other", [other])) for r in rs}

        def claimed() -> list[str]:
            return sorted(names[pk] for pk in claim(stator, clock))

        assert claimed() == ["other", "shout"]  # one shout: shout is full
        assert claimed() == ["mailed"]  # mail's second place
        assert claimed() == []  # mail is full
        finish(stator, clock, shouts + mailed + [other])


@pytest.mark.parametrize("limits", [{"send_mail": 1}, {ADD: 0}, [ADD], {ADD: "2"}])
def test_a_wrong_task_limit_is_refused(alias: str, limits: Any) -> None:
    with settings(alias, TASK_LIMITS=limits), pytest.raises(ImproperlyConfigured,
                                                             match="TASK_LIMITS"):
        StatorTask.stator_claim_limits()
