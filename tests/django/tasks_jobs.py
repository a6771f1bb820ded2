"""Tasks used by test_tasks.py (module level, as django.tasks requires), declared under the
settings the tests run them with: the test project itself configures no task backend."""

import threading
from typing import Any

from django.db import transaction
from django.tasks import TaskContext, task
from django.test import override_settings
from djtest.orders.models import Receipt

TASKS = {"default": {"BACKEND": "stator.django.tasks.StatorBackend",
                     "QUEUES": ["default", "mail"], "OPTIONS": {"max_attempts": 3}}}

# A test's ManualClock, for a task that takes a minute of its time (``take_a_minute``).
CLOCKS: list[Any] = []

with override_settings(TASKS=TASKS):

    @task
    def take_a_minute() -> None:
        CLOCKS[0].advance(60)

    @task
    def add(a: int, b: int) -> int:
        return a + b

    @task(queue_name="mail")
    def shout(text: str) -> str:
        return text.upper()

    @task
    def fail(message: str) -> None:
        raise ValueError(message)

    @task
    def write_then_fail(alias: str, order_id: int) -> None:
        """Writes a row, then raises: the write must be undone, the error kept."""
        Receipt.objects.using(alias).create(order_id=order_id)
        raise RuntimeError("after writing")

    @task
    def write_in_atomic(alias: str, order_id: int, then_fail: bool) -> int:
        """Writes inside its own atomic blocks (savepoints nested in the task's)."""
        with transaction.atomic(using=alias):
            receipt, _ = Receipt.objects.using(alias).update_or_create(order_id=order_id)
        if then_fail:
            raise RuntimeError("after a committed inner block")
        return int(receipt.pk)

    @task(takes_context=True)
    def attempt_number(context: TaskContext) -> int:
        return context.attempt

    @task(takes_context=True)
    def own_status(context: TaskContext) -> str:
        """What ``get_result`` says about this very task while it runs (another reader's
        view: the claim that started it is committed, the attempt is not)."""
        result = context.task_result
        return str(result.task.get_backend().get_result(result.id).status)

    @task
    async def async_add(a: int, b: int) -> int:
        return a + b

    @task
    def returns_object() -> object:
        return object()

    @task
    def raise_base(kind: str) -> None:
        """Raises a ``BaseException`` that is no ``Exception`` (by the name of its class)."""
        raise {"SystemExit": SystemExit, "KeyboardInterrupt": KeyboardInterrupt,
               "GeneratorExit": GeneratorExit}[kind](f"{kind} from the task")

    @task(takes_context=True)
    def own_times(context: TaskContext) -> list[str | None]:
        """Its own start times as another reader sees them while it runs."""
        result = context.task_result
        seen = result.task.get_backend().get_result(result.id)
        return [str(seen.status), seen.started_at and seen.started_at.isoformat(),
                seen.last_attempted_at and seen.last_attempted_at.isoformat()]

    @task
    def wait_for_release() -> str:
        """Blocks until the test sets ``released`` (far past a short timeout)."""
        released.wait(60)
        return "late"

    not_a_task = "a plain string where a task should be"


released = threading.Event()
