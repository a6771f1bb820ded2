"""What Django documents for backends that store results and run tasks elsewhere, on Stator
(SQLite and PostgreSQL): results read back, refreshed, deferred, ordered, retried, and the
failure paths (a task that cannot start, one that raises anything at all)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django.tasks import TaskResultStatus, default_task_backend
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.tasks.signals import task_finished, task_started
from django.utils import timezone

from stator.django._task_model import StatorTask

from . import jobs
from .conftest import Harness

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "pg"])


def test_the_backend_declares_every_feature(stator_backend: Harness) -> None:
    backend = default_task_backend
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority


def test_get_result_on_the_task_and_on_the_backend(stator_backend: Harness) -> None:
    """"The get_result method can retrieve a result based on its id"; "regardless of which
    kind of Task it was from, use the get_result method on the backend"."""
    result = jobs.echo.enqueue(5)
    for fetched in (jobs.echo.get_result(result.id), default_task_backend.get_result(result.id)):
        assert fetched.id == result.id and fetched.status == TaskResultStatus.READY
        assert fetched.args == [5] and fetched.task.func is jobs.echo.func


def test_an_unknown_id_raises_does_not_exist(stator_backend: Harness) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        jobs.echo.get_result("0" * 32)
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("not an id at all")


def test_a_result_of_another_task_raises_mismatch(stator_backend: Harness) -> None:
    """``Task.get_result`` raises when the result "is not the same type as the current
    Task"."""
    result = jobs.echo.enqueue()
    with pytest.raises(TaskResultMismatch):
        jobs.mail.get_result(result.id)


def test_a_result_does_not_update_until_refreshed(stator_backend: Harness) -> None:
    """"If the Task finishes after get_result is called, it will not update ... call
    refresh"; ``return_value`` raises ``ValueError`` "Task has not finished yet" before."""
    result = jobs.mail.enqueue("later")
    fetched = jobs.mail.get_result(result.id)
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = fetched.return_value
    stator_backend.drain()
    assert fetched.status == TaskResultStatus.READY
    fetched.refresh()
    assert fetched.status == TaskResultStatus.SUCCESSFUL and fetched.return_value == "LATER"


def test_aenqueue_aget_result_and_arefresh(stator_backend: Harness) -> None:
    """The ``a``-prefixed variants take the same arguments and give the same answers."""

    async def enqueue_and_fetch() -> Any:
        try:
            result = await jobs.echo.aenqueue(7, key="v")
            return result, await jobs.echo.aget_result(result.id)
        finally:
            await sync_to_async(connections.close_all)()

    result, fetched = asyncio.run(enqueue_and_fetch())
    assert fetched.id == result.id and fetched.status == TaskResultStatus.READY
    stator_backend.drain()

    async def refresh() -> None:
        try:
            await fetched.arefresh()
        finally:
            await sync_to_async(connections.close_all)()

    asyncio.run(refresh())
    assert fetched.return_value == {"args": [7], "kwargs": {"key": "v"}}


def test_run_after_is_the_earliest_time(stator_backend: Harness) -> None:
    """``run_after``: "The earliest time the Task will be executed"."""
    assert stator_backend.clock is not None
    later = jobs.echo.using(run_after=stator_backend.clock.now() + timedelta(minutes=5))
    result = later.enqueue()
    stator_backend.drain()
    assert jobs.echo.get_result(result.id).status == TaskResultStatus.READY
    stator_backend.advance(301)
    stator_backend.drain()
    assert jobs.echo.get_result(result.id).status == TaskResultStatus.SUCCESSFUL


def test_a_naive_run_after_is_invalid(stator_backend: Harness) -> None:
    """"run_after must be an aware datetime" when ``USE_TZ``."""
    with pytest.raises(InvalidTask, match="aware"):
        jobs.echo.using(run_after=timezone.now().replace(tzinfo=None))


def test_higher_priorities_run_sooner(stator_backend: Harness) -> None:
    """"larger numbers are higher priority, and will be run sooner"."""
    order: list[int] = []

    def receive(sender: type, task_result: Any, **_kw: Any) -> None:
        order.append(task_result.task.priority)

    low = [jobs.echo.using(priority=p).enqueue() for p in (-100, -3)]
    high = [jobs.echo.using(priority=p).enqueue() for p in (100, 50, 0)]
    task_started.connect(receive)
    try:
        stator_backend.drain()
    finally:
        task_started.disconnect(receive)
    assert len(order) == len(low) + len(high)
    assert order == sorted(order, reverse=True)


def test_a_task_runs_on_its_queue(stator_backend: Harness) -> None:
    """``queue_name``: the queue the Task is enqueued on."""
    result = jobs.mail.enqueue("q")
    row = StatorTask.objects.using(stator_backend.alias).get(pk=result.id)
    assert row.queue_name == "mail"
    assert jobs.mail.get_result(result.id).task.queue_name == "mail"


def test_a_rolled_back_enqueue_leaves_no_task(stator_backend: Harness) -> None:
    """A database backend enqueues in the caller's transaction: no task for a rolled-back
    order (what Django users want of one; see LESSONS)."""
    with transaction.atomic(using=stator_backend.alias):
        result = jobs.echo.enqueue()
        transaction.set_rollback(True, using=stator_backend.alias)
    with pytest.raises(TaskResultDoesNotExist):
        jobs.echo.get_result(result.id)


def test_a_running_task_reads_running_with_its_start_time(
    stator_backend: Harness,
) -> None:
    """RUNNING: "The Task is currently being executed"; ``started_at``: "The time when the
    Task began execution"; ``attempts``: "If the task is currently running, it does not count
    as an attempt"."""
    result = stator_backend.finished(jobs.seen_while_running.enqueue())
    assert result.return_value == {"status": "RUNNING", "started": True,
                                   "last_attempted": True, "attempts": 0, "finished": False}


def test_started_at_is_the_first_attempts_and_errors_accumulate(
    retrying_backend: Harness,
) -> None:
    """``started_at``: "on its first attempt"; ``last_attempted_at`` moves with each attempt;
    ``errors`` holds one entry per failed execution; ``TaskContext.attempt`` counts from 1."""
    result = jobs.fails_first_time.enqueue()
    retrying_backend.drain()
    first = jobs.fails_first_time.get_result(result.id)
    assert first.status == TaskResultStatus.READY and len(first.errors) == 1
    retrying_backend.advance(11)
    done = retrying_backend.finished(result)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 2
    assert done.started_at == first.started_at
    assert done.last_attempted_at is not None and first.last_attempted_at is not None
    assert done.last_attempted_at > first.last_attempted_at
    assert done.attempts == 2 and len(done.errors) == 1


@pytest.mark.parametrize("enqueue", [
    lambda: jobs.exits.enqueue(0), lambda: jobs.interrupts.enqueue(),
    lambda: jobs.keyboard.enqueue(),
], ids=["SystemExit", "BaseException", "KeyboardInterrupt"])
def test_any_exception_fails_at_once_and_is_announced(
    retrying_backend: Harness, enqueue: Any,
) -> None:
    """An exception that is not an ``Exception`` is not retried silently: FAILED at once
    (whatever ``max_attempts``), its error kept, ``task_finished`` sent, and the worker goes
    on to the next task."""
    finished: list[str] = []

    def receive(sender: type, task_result: Any, **_kw: Any) -> None:
        finished.append(str(task_result.status))

    result = enqueue()
    after = jobs.echo.enqueue("next")
    task_finished.connect(receive)
    try:
        done = retrying_backend.finished(result)
    finally:
        task_finished.disconnect(receive)
    assert done.status == TaskResultStatus.FAILED
    assert done.attempts == 1 and len(done.errors) == 1
    assert done.started_at is not None and done.finished_at is not None
    assert sorted(finished) == ["FAILED", "SUCCESSFUL"]
    assert jobs.echo.get_result(after.id).return_value == {"args": ["next"], "kwargs": {}}


@pytest.mark.parametrize("path", [
    "tasks_conformance.jobs.renamed_away", "tasks_conformance.no_such_module.task",
    "tasks_conformance.jobs.QUEUES",
], ids=["missing-function", "missing-module", "not-a-task"])
def test_a_task_that_cannot_start_fails_with_the_reason(
    retrying_backend: Harness, path: str,
) -> None:
    """FAILED: "The Task raised an exception during execution, or was unable to start" —
    at once, with the import error in ``errors``; reading the result does not raise it."""
    result = jobs.echo.enqueue()
    StatorTask.objects.using(retrying_backend.alias).filter(pk=result.id).update(task_path=path)
    retrying_backend.drain()
    done = default_task_backend.get_result(result.id)
    assert done.status == TaskResultStatus.FAILED
    assert len(done.errors) == 1 and done.errors[0].traceback
    assert done.finished_at is not None
