"""What Django's task documentation says of every backend, on Stator and on Django's own
``ImmediateBackend`` alike (``docs/topics/tasks.txt`` and ``docs/ref/tasks.txt``, Django 6).

Each test quotes or names the sentence it checks.  A test that passes on the immediate
backend shows the expectation is Django's; the same test on Stator shows we keep it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import FrozenInstanceError
from datetime import datetime
from functools import partial
from typing import Any

import pytest
from django.db import transaction
from django.tasks import TaskResult, TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask
from django.tasks.signals import task_enqueued, task_finished, task_started

from . import jobs
from .conftest import Harness

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "pg"])

ALL_STATUSES = {TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED}


def test_enqueue_returns_a_task_result_with_a_string_id(backend: Harness) -> None:
    """"This returns a TaskResult"; "Task ids are always strings less than 64 characters"."""
    result = jobs.echo.enqueue(1)
    assert isinstance(result, TaskResult)
    assert isinstance(result.id, str) and 0 < len(result.id) < 64
    assert result.task.func is jobs.echo.func
    assert result.backend == "default"


def test_arguments_reach_the_function_as_they_were_passed(backend: Harness) -> None:
    """"Arguments and keyword arguments are passed to the Task's function as-is"."""
    result = backend.finished(jobs.echo.enqueue(1, "two", [3], flag=True, nested={"a": None}))
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"args": [1, "two", [3]],
                                   "kwargs": {"flag": True, "nested": {"a": None}}}
    assert result.args == [1, "two", [3]]
    assert result.kwargs == {"flag": True, "nested": {"a": None}}


def test_arguments_must_be_json_serializable(backend: Harness) -> None:
    """"Because both Task arguments and return values are serialized to JSON, they must be
    JSON-serializable": ``TypeError`` at enqueue (its wording is Django's, and varies)."""
    with pytest.raises(TypeError):
        jobs.echo.enqueue(datetime.now())


def test_a_tuple_comes_back_a_list(backend: Harness) -> None:
    """The docs' ``double_dictionary((1, 2, 3))`` example: FAILED, ``TypeError: unhashable
    type: 'list'`` in the traceback."""
    result = backend.finished(jobs.double_dictionary.enqueue((1, 2, 3)))
    assert result.status == TaskResultStatus.FAILED
    assert "TypeError: unhashable type: 'list'" in result.errors[0].traceback


def test_a_return_value_json_cannot_hold_fails_the_task(backend: Harness) -> None:
    """Return values "must be JSON-serializable" too: the task fails, with the error."""
    result = backend.finished(jobs.returns_a_set.enqueue())
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError


def test_a_return_value_is_read_back(backend: Harness) -> None:
    """"If your Task function returns something, it can be retrieved from
    TaskResult.return_value"."""
    result = backend.finished(jobs.mail.enqueue("hello"))
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "HELLO"


def test_return_value_of_a_failed_task_raises_value_error(backend: Harness) -> None:
    """"If the Task has not finished executing, or has failed, ValueError is raised"."""
    result = backend.finished(jobs.fails.enqueue("nope"))
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value


def test_errors_keep_the_exception_class_and_traceback(backend: Harness) -> None:
    """"the exception and traceback are saved to the TaskResult.errors list"; each entry has
    ``exception_class`` (the type only) and ``traceback`` (a string)."""
    result = backend.finished(jobs.fails.enqueue("it broke"))
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is ValueError
    assert error.exception_class_path == "builtins.ValueError"
    assert isinstance(error.traceback, str)
    assert "ValueError: it broke" in error.traceback


@pytest.mark.parametrize(("enqueue", "path"), [
    (lambda: jobs.exits.enqueue(3), "builtins.SystemExit"),
    (lambda: jobs.interrupts.enqueue(), "tasks_conformance.jobs.Interrupted"),
], ids=["SystemExit", "BaseException"])
def test_a_base_exception_fails_the_task_with_its_error(
    backend: Harness, enqueue: Any, path: str,
) -> None:
    """"If the Task doesn't succeed, and instead raises an exception, either as part of the
    Task or as part of running it, the exception and traceback are saved": any exception,
    ``SystemExit`` and other ``BaseException`` subclasses included."""
    result = backend.finished(enqueue())
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == [path]
    assert result.finished_at is not None


def test_a_context_names_the_result_and_the_attempt(backend: Harness) -> None:
    """``TaskContext.task_result`` is the result being run; ``attempt`` starts from 1."""
    result = backend.finished(jobs.context_of.enqueue())
    assert result.return_value == {"id": result.id, "attempt": 1}


def test_async_functions_are_tasks(backend: Harness) -> None:
    """``supports_async_task``: a coroutine function is enqueued and awaited."""
    assert default_task_backend.supports_async_task
    assert backend.finished(jobs.async_double.enqueue(21)).return_value == 42


def test_a_finished_result_has_its_times_attempts_and_worker(backend: Harness) -> None:
    """``started_at``, ``last_attempted_at``, ``finished_at``, ``is_finished``, ``attempts``
    ("the number of times the task has been run") and ``worker_ids``."""
    result = backend.finished(jobs.echo.enqueue())
    assert result.is_finished
    assert result.enqueued_at is not None and result.started_at is not None
    assert result.enqueued_at <= result.started_at <= result.finished_at  # type: ignore[operator]
    assert result.last_attempted_at is not None
    assert result.attempts == 1
    assert len(result.worker_ids) == 1


def test_signals_are_sent_in_order_with_the_result(backend: Harness) -> None:
    """``task_enqueued``, ``task_started``, ``task_finished``: sent by the backend's class,
    each with the ``task_result`` at that point."""
    seen: list[tuple[str, type, str, str]] = []

    def receiver(name: str) -> Any:
        def receive(sender: type, task_result: TaskResult, **_kw: Any) -> None:
            seen.append((name, sender, task_result.id, str(task_result.status)))
        return receive

    receivers = {task_enqueued: receiver("enqueued"), task_started: receiver("started"),
                 task_finished: receiver("finished")}
    for signal, receive in receivers.items():
        signal.connect(receive)
    try:
        good = backend.finished(jobs.echo.enqueue())
        bad = backend.finished(jobs.fails.enqueue("no"))
    finally:
        for signal, receive in receivers.items():
            signal.disconnect(receive)
    sender = type(task_backends["default"])
    for result, end in ((good, "SUCCESSFUL"), (bad, "FAILED")):
        mine = [(name, who, status) for name, who, rid, status in seen if rid == result.id]
        assert mine == [("enqueued", sender, "READY"), ("started", sender, "RUNNING"),
                        ("finished", sender, end)]


def test_using_makes_a_new_task_and_leaves_the_original(backend: Harness) -> None:
    """"A Task instance cannot be modified directly ... a modified instance can be created
    with the using method, leaving the original as-is"."""
    changed = jobs.echo.using(priority=10, queue_name="mail")
    assert (changed.priority, changed.queue_name) == (10, "mail")
    assert (jobs.echo.priority, jobs.echo.queue_name) == (0, "default")
    with pytest.raises(FrozenInstanceError):
        jobs.echo.priority = 5  # type: ignore[misc]


@pytest.mark.parametrize("priority", [-101, 101])
def test_priorities_outside_the_range_are_invalid(backend: Harness, priority: int) -> None:
    """"Priorities must be between -100 and 100"."""
    with pytest.raises(InvalidTask, match="priority"):
        jobs.echo.using(priority=priority)


def test_a_queue_the_backend_does_not_have_is_invalid(backend: Harness) -> None:
    """``queue_name`` "must match a queue defined in QUEUES"."""
    with pytest.raises(InvalidTask, match="Queue 'elsewhere' is not valid"):
        jobs.echo.using(queue_name="elsewhere")


def test_a_priority_given_at_definition_is_kept(backend: Harness) -> None:
    """``@task(priority=…)`` customizes the Task's attributes."""
    result = backend.finished(jobs.urgent.enqueue())
    assert result.task.priority == 7 and result.return_value == "urgent"


@pytest.fixture
def ran() -> Iterator[list[str]]:
    seen: list[str] = []

    def receive(sender: type, task_result: TaskResult, **_kw: Any) -> None:
        seen.append(task_result.id)

    task_started.connect(receive)
    try:
        yield seen
    finally:
        task_started.disconnect(receive)


def test_an_on_commit_enqueue_waits_for_the_commit(backend: Harness, ran: list[str]) -> None:
    """Transactions: ``transaction.on_commit(partial(my_task.enqueue, …))`` enqueues once the
    transaction commits, and never if it rolls back."""
    committed: list[TaskResult] = []
    with transaction.atomic():
        transaction.on_commit(lambda: committed.append(jobs.echo.enqueue("kept")))
        assert committed == []
    with transaction.atomic():
        transaction.on_commit(partial(jobs.echo.enqueue, "dropped"))
        transaction.set_rollback(True)
    [result] = committed
    assert backend.finished(result).return_value == {"args": ["kept"], "kwargs": {}}
    backend.drain()
    assert ran == [result.id]


def test_get_result_is_supported_as_the_flag_says(backend: Harness) -> None:
    """"Some backends, such as the built-in ImmediateBackend do not support get_result()";
    ``supports_get_result`` tells which."""
    result = jobs.echo.enqueue()
    if default_task_backend.supports_get_result:
        assert jobs.echo.get_result(result.id).id == result.id
    else:
        with pytest.raises(NotImplementedError):
            jobs.echo.get_result(result.id)
