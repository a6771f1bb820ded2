"""The row behind every ``django.tasks`` task run by Stator, and the graph it moves through.

A task is an ordinary Stator row: ``ready`` (enqueued, due at ``run_after`` or at once) →
``successful`` or ``failed``, both deleted ``keep_results`` after they are entered.  The
claim of a ready row is the task's start: its handler runs the task function under the
claim's lease, and the attempt's record rides the one fenced write that moves the row on (or
back to ``ready``, backed off, for another attempt).  So a task costs one claim and one write,
shared with the rest of its batch, and starts as soon as it is claimed.

Django's RUNNING is not a state of its own: the claim copies its lease into ``leased_until``
(``stator_lease_column``), and a ready row whose ``state_next`` still equals it is held by a
worker (any write of the engine's moves ``state_next`` on).  A worker killed mid-task leaves
its row ready under a lease that expires; the next worker runs it again, so a task is never
stuck RUNNING.  There is no ``running`` state: the rows an earlier version left in one are
moved back to ``ready`` by migration 0008, under the lease they held.

This module imports on Django 5.2 as well (the model is part of the ``stator`` app there too);
only running a task needs ``django.tasks`` (Django >= 6.0), and that is checked by a system
check (``stator.E020``) instead of failing with an ImportError.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Iterable
from typing import Any

from django.core import checks
from django.db import models

from .._graph import State, StateGraph
from ._stator_model import StatorModel
from ._task_options import (
    BACKEND_PATH,
    DEFAULT_KEEP_RESULTS,
    DEFAULT_RETRY_AFTER,
    DEFAULT_TIMEOUT,
    option,
    queue_limits,
    stator_backends,
    task_limits,
)
from .fields import StatorDateTimeField

KEEP_RESULTS = option("keep_results", DEFAULT_KEEP_RESULTS, none_is_forever=True)
TIMEOUT = option("timeout", DEFAULT_TIMEOUT) or DEFAULT_TIMEOUT
RETRY_AFTER = option("retry_after", DEFAULT_RETRY_AFTER) or DEFAULT_RETRY_AFTER
# A task past its timeout (or whose result could not be saved) is a failure of Stator's own:
# it backs off like any other and, after this many in a row, the task is FAILED.
STALLS_ALLOWED = 3
STATUS_OF_STATE = {
    "successful": "SUCCESSFUL", "failed": "FAILED",
}


class TaskStates(StateGraph):
    ready = State(
        retry_after=RETRY_AFTER, timeout=TIMEOUT, max_attempts=STALLS_ALLOWED,
    )
    successful = State(delete_after=KEEP_RESULTS)
    failed = State(delete_after=KEEP_RESULTS)

    ready.transitions_to(successful)
    ready.transitions_to(failed)
    ready.fails_to(failed)

    # The code that runs a task is imported when one runs: it needs ``django.tasks`` (Django
    # >= 6.0), and this module must import on Django 5.2 too (see the module's docstring).

    @classmethod
    def check_ready(cls, task: StatorTask) -> State:
        return _task_runner()(task, cls)


@functools.cache
def _task_runner() -> Callable[[StatorTask, type[TaskStates]], State]:
    """``run_task``, imported once (an import statement per task cost a tenth of a no-op
    task's handler time); Django >= 6.0 only (see ``TaskStates``)."""
    from ._task_run import run_task

    return run_task


class StatorTask(StatorModel):
    """One enqueued ``django.tasks`` task, its attempts and its result."""

    state_graph = TaskStates

    id = models.CharField(primary_key=True, max_length=64, editable=False)
    task_path = models.CharField("task", max_length=255)
    queue_name = models.CharField("queue", max_length=64)
    priority = models.SmallIntegerField(default=0)
    backend = models.CharField(max_length=64)
    args_kwargs = models.JSONField("arguments")
    run_after = models.DateTimeField(null=True, blank=True)
    max_attempts = models.PositiveSmallIntegerField(default=1)
    enqueued_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    return_value = models.JSONField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)
    worker_ids = models.JSONField(default=list, blank=True)
    # The lease of the claim that last took the row (see the module's docstring).
    leased_until = StatorDateTimeField(null=True, blank=True, editable=False)

    # Due tasks are claimed by priority first (highest first), then by due time.
    stator_claim_priority = "priority"
    stator_lease_column = "leased_until"
    # The claim that starts an attempt stamps it: a RUNNING task has its start times.
    stator_claim_stamps = {"started_at": "first", "last_attempted_at": "each"}
    # The attempt's record (``stator_extra``, set by ``_task_run``), written by the fenced
    # write that moves the task on, in the same statement and only if its lease still held.
    stator_write_columns = {
        "started_at": "time", "last_attempted_at": "time", "finished_at": "time",
        "return_value": "json", "errors": "json", "worker_ids": "json",
    }

    @classmethod
    def stator_claim_limits(cls) -> dict[str, list[tuple[dict[str, int], str]]]:
        """``OPTIONS["QUEUE_LIMITS"]``: at most N ready tasks of a queue held at once (the
        claim counts them by the lease in ``leased_until``); ``OPTIONS["TASK_LIMITS"]``:
        at most N of a task path, whatever its queue.  A task under both runs only while
        both have room; other queues and tasks unlimited."""
        limits = [(most, column) for most, column in (
            (queue_limits(), "queue_name"), (task_limits(), "task_path")) if most]
        return {"ready": limits} if limits else {}

    class Meta:
        app_label = "stator"
        db_table = "stator_tasks"
        verbose_name = "task"
        indexes = [
            models.Index(
                fields=["state", "-priority", "state_next"], name="stator_tasks_claim",
                condition=models.Q(state_next__isnull=False),
            ),
            # A claim under QUEUE_LIMITS finds each queue's due tasks by this index: one
            # probe per queue, however many tasks wait (``_limit_statements``).
            models.Index(
                fields=["state", "queue_name", "state_next"], name="stator_tasks_queue",
                condition=models.Q(state_next__isnull=False),
            ),
            # And each task path's, under TASK_LIMITS alone.
            models.Index(
                fields=["state", "task_path", "state_next"], name="stator_tasks_task",
                condition=models.Q(state_next__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task_path} ({self.id})"

    @property
    def status(self) -> str:
        """Django's name for where the task is: READY, RUNNING, SUCCESSFUL or FAILED."""
        if self.state == "ready":
            held = self.leased_until is not None and self.leased_until == self.state_next
            return "RUNNING" if held else "READY"
        return STATUS_OF_STATE.get(self.state, "READY")

    @classmethod
    def stator_failure_extra(cls, row: StatorTask, write: Any, error: BaseException | None) -> Any:
        """The result columns after a failure of the engine's (see ``failure_record``)."""
        from ._task_run import failure_record  # Django >= 6.0 only (see ``TaskStates``)

        return failure_record(row, write, error)

    @classmethod
    def stator_claim_where(cls, options: dict[str, Any]) -> str | None:
        """The claim condition for a worker of ``options["queues"]`` (None: every queue),
        but not ``options["exclude_queues"]``, of ``options["backends"]`` (None: all)."""
        conditions = [
            f"{column}{negation} IN ({', '.join(_sql_text(v) for v in values)})"
            for column, negation, values in (
                ("queue_name", "", options.get("queues")),
                ("queue_name", " NOT", options.get("exclude_queues")),
                ("backend", "", options.get("backends")),
            )
            if values
        ]
        return " AND ".join(conditions) or None


def _sql_text(value: str) -> str:
    """A string literal in a claim condition (built once per worker, from its options)."""
    return "'" + value.replace("'", "''") + "'"


@checks.register()
def check_task_backend(app_configs: Iterable[Any] | None = None, **kwargs: Any) -> list[Any]:
    """On Django < 6.0 a configured Stator task backend can never run: say so clearly."""
    if not stator_backends() or importlib.util.find_spec("django.tasks") is not None:
        return []
    import django

    return [checks.Error(
        f"TASKS uses {BACKEND_PATH}, but Django {django.get_version()} has no task framework "
        "(django.tasks).",
        hint="The Stator task backend needs Django >= 6.0 (and Python >= 3.12); upgrade "
        "Django or remove the backend from TASKS.",
        id="stator.E020",
    )]
