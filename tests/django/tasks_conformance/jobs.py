"""Module-level tasks for the conformance suite (``django.tasks`` needs module-level functions).

They are declared under a Stator backend with two queues; every backend the suite runs
(Stator on SQLite and PostgreSQL, Django's ``ImmediateBackend``) is configured with the same
queues, so each of them accepts these tasks as they are.
"""

from __future__ import annotations

import sys
from typing import Any

from django.tasks import TaskContext, task
from django.test import override_settings

QUEUES = ["default", "mail"]
TASKS = {"default": {"BACKEND": "stator.django.tasks.StatorBackend", "QUEUES": QUEUES}}


class Interrupted(BaseException):
    """A ``BaseException`` that is neither ``SystemExit`` nor ``KeyboardInterrupt``."""


with override_settings(TASKS=TASKS):

    @task
    def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return {"args": list(args), "kwargs": kwargs}

    @task
    def double_dictionary(key: Any) -> dict[Any, Any]:
        """The docs' own example: a tuple comes back a list, and a list is no dict key."""
        return {key: key * 2}

    @task
    def fails(message: str) -> None:
        raise ValueError(message)

    @task
    def exits(code: int) -> None:
        sys.exit(code)

    @task
    def interrupts() -> None:
        raise Interrupted("stop")

    @task
    def keyboard() -> None:
        raise KeyboardInterrupt

    @task
    def returns_a_set() -> object:
        return {1, 2}

    @task(takes_context=True)
    def context_of(context: TaskContext) -> dict[str, Any]:
        return {"id": context.task_result.id, "attempt": context.attempt}

    @task(takes_context=True)
    def seen_while_running(context: TaskContext) -> dict[str, Any]:
        """What another reader sees of this very task while it runs."""
        result = context.task_result
        current = result.task.get_backend().get_result(result.id)
        return {
            "status": str(current.status),
            "started": current.started_at is not None,
            "last_attempted": current.last_attempted_at is not None,
            "attempts": current.attempts,
            "finished": current.is_finished,
        }

    @task(takes_context=True)
    def fails_first_time(context: TaskContext) -> int:
        if context.attempt == 1:
            raise RuntimeError("first attempt")
        return context.attempt

    @task
    async def async_double(value: int) -> int:
        return value * 2

    @task(queue_name="mail")
    def mail(text: str) -> str:
        return text.upper()

    @task(priority=7)
    def urgent() -> str:
        return "urgent"
