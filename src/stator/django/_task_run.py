"""Running one task: the handler of ``TaskStates.ready`` (Django >= 6.0 only), run under the
lease of the claim that picked the task up, so a task starts as soon as it is claimed.

The attempt's record (times, return value, errors) always commits with the row's transition:
the handler leaves it on the row (``stator_extra``) and the engine's batched, fenced write
sets it in the same statement as the transition (``Write.extra``,
``StatorTask.stator_write_columns``), so a no-op task costs no statement of its own, and a
record whose fence no longer held is never written.  A
task that writes to the database gets the handler's transaction (its writes, its record and
its transition commit together); if it raises, its writes are rolled back to a savepoint
taken before the first of them, and the error is kept.  Signals follow ``django.tasks``:
``task_started`` before the function runs, ``task_finished`` when it has returned or raised
(the record is committed with the transition, moments later).
"""

from __future__ import annotations

import os
import socket
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

from django.conf import settings
from django.db import connections
from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from .. import _backoff
from .._clock import handler_now
from .._graph import State
from .._policy import DecidedFailure, Moved, Stayed, Write
from .._store._writes import writes
from ._task_options import DEFAULT_RETRY_AFTER, MAX_RETRY_AFTER
from .tasks import (
    StatorBackend,
    class_path,
    replacer,
    result_from_row,
    task_error,
    unavailable_error,
    unavailable_task,
)

if TYPE_CHECKING:
    from ._task_model import StatorTask, TaskStates

RESULT_FIELDS = (
    "started_at", "last_attempted_at", "finished_at", "return_value", "errors", "worker_ids",
)
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"[-64:]


def run_task(row: StatorTask, graph: type[TaskStates]) -> State:
    """Run ``row``'s task once and record the attempt on the row; the next state, or (the
    task raised) ``DecidedFailure``: wait (with backoff) for the next attempt, or FAILED.

    A task that cannot start (``_unable_to_start``), or that raises a ``BaseException``
    beyond ``Exception`` (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``...), is
    FAILED at once whatever ``max_attempts`` says: retrying cannot help, and the error is
    the task's, so the worker and its thread carry on.  On a handler thread a
    ``KeyboardInterrupt`` can only be the task's own raise (Ctrl-C reaches the main thread,
    which stops the worker gracefully)."""
    # The claim that started the task already set both (``stator_claim_stamps``): the clock
    # is read only for a row that came some other way.
    if row.started_at is None or row.last_attempted_at is None:
        now = _now()
        row.started_at = row.started_at or now
        row.last_attempted_at = row.last_attempted_at or now
    row.worker_ids = [*row.worker_ids, WORKER_ID]
    try:
        result = result_from_row(row, status="RUNNING")
    except BaseException as exc:  # e.g. SystemExit while importing the task's module
        result = result_from_row(row, "RUNNING", unavailable_task(row, exc))
    reason = unavailable_error(result.task)
    if reason is not None:
        return _unable_to_start(row, graph, result, reason)
    task_started.send(StatorBackend, task_result=result)
    using = row._state.db or "default"
    error: BaseException | None = None
    try:
        with _UndoableWrites(using):
            value = _call(result)
    except BaseException as exc:  # the task's failure is recorded; the worker carries on
        error = exc
    if error is not None:  # out of the ``except``: see ``_attempt_failed``
        _attempt_failed(row, graph, result, error)
    row.return_value = value
    row.finished_at = _finish_time(row)
    _save(row, result, TaskResultStatus.SUCCESSFUL)
    return graph.successful


def _attempt_failed(
    row: StatorTask, graph: type[TaskStates], result: TaskResult, exc: BaseException
) -> NoReturn:
    """Record a failed attempt and hand it to the engine as a failure (``DecidedFailure``):
    it is logged once (one WARNING, by the worker), recorded with Stator's errors and counted
    in ``stator status``, while the task's own ``max_attempts`` and backoff decide what
    follows.  An ``Exception`` is retried while attempts are left; any other
    ``BaseException`` fails the task at once.  Called outside the ``except`` block on
    purpose: Django's own ``task_finished`` receiver then logs its one line without the
    traceback, which the worker's line already shows."""
    row.errors = [*row.errors, task_error(exc)]
    attempt = len(row.worker_ids)
    if isinstance(exc, Exception) and attempt < row.max_attempts:
        _save(row, result, None)
        raise DecidedFailure(Stayed(_retry_delay(row)), attempt) from exc
    _failed(row, graph, result)
    raise DecidedFailure(Moved(graph.failed), attempt) from exc


def _failed(row: StatorTask, graph: type[TaskStates], result: TaskResult) -> State:
    row.finished_at = _finish_time(row)
    _save(row, result, TaskResultStatus.FAILED)
    return graph.failed


def _finish_time(row: StatorTask) -> datetime:
    """Now, but never before the attempt's start (the claim's stamp, by the same clock): a
    system clock stepped back in between must not make a task finish before it began."""
    now = _now()
    started = row.last_attempted_at
    return started if started is not None and started > now else now


def _now() -> datetime:
    """The worker's clock (``handler_now``: a test's ``ManualClock`` too), as this project's
    fields hold times (naive local ones when ``USE_TZ`` is off)."""
    now = handler_now()
    return now if settings.USE_TZ else timezone.make_naive(now)


def _unable_to_start(
    row: StatorTask, graph: type[TaskStates], result: TaskResult, reason: dict[str, str]
) -> State:
    """Django's "unable to start": the row's path no longer loads a task.  FAILED at once
    with the import error (no ``task_started``; ``task_finished`` is sent)."""
    row.errors = [*row.errors, reason]
    return _failed(row, graph, result)


class _UndoableWrites:
    """Undo the task's own writes if it raises, keeping the rest of the handler's transaction.

    The savepoint is taken just before the task's first write, not when it starts: on SQLite
    a savepoint takes the write lock, and a task that reads or calls out for a while must not
    hold it (tasks that never write run side by side)."""

    def __init__(self, using: str) -> None:
        self.conn = connections[using]
        self.savepoint: str | None = None
        self._taking = False

    def __enter__(self) -> None:
        # What ``conn.execute_wrapper`` does, without its generator (once per task).
        self.conn.execute_wrappers.append(self._before_write)

    def _before_write(self, execute: Any, sql: str, params: Any, many: bool, ctx: Any) -> Any:
        if (self.savepoint is None and not self._taking and self.conn.in_atomic_block
                and writes(sql)):
            self._taking = True
            try:
                self.savepoint = self.conn.savepoint()
            finally:
                self._taking = False
        return execute(sql, params, many, ctx)

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        self.conn.execute_wrappers.pop()
        if self.savepoint is None:
            return
        if kind is None:
            self.conn.savepoint_commit(self.savepoint)
        else:
            self.conn.savepoint_rollback(self.savepoint)


def _call(result: Any) -> Any:
    task = result.task
    if task.takes_context:
        value = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
    else:
        value = task.call(*result.args, **result.kwargs)
    if value is None or type(value) in _PLAIN:  # as normalize_json returns them
        return value
    return normalize_json(value)  # a value JSON cannot hold fails the attempt, as in Django


_PLAIN = frozenset({str, int, float, bool})


def failure_record(row: StatorTask, write: Write, error: BaseException | None) -> dict[str, Any]:
    """The result columns after a failure of the engine's (the task past its ``timeout``, an
    exception raised around the task rather than by it, a result that could not be saved):
    the attempt as it stands, its reason added to ``errors`` (for a timeout a
    ``TimeoutError`` naming the limit, after where the task was), and ``finished_at`` once
    the write makes the task FAILED.  So every FAILED task says why."""
    failure = write.failure
    assert failure is not None
    if failure.kind == "timeout":
        limit = type(row).state_graph.states[write.fence_state].timeout
        entry = {"exception_class_path": "builtins.TimeoutError", "traceback": (
            f"{failure.traceback}TimeoutError: the task did not finish within its timeout "
            f"of {limit:g}s\n"
        )}
    elif error is not None:
        entry = {"exception_class_path": class_path(type(error)),
                 "traceback": failure.traceback}
    else:
        entry = {"exception_class_path": "builtins.RuntimeError",
                 "traceback": f"{failure.traceback}RuntimeError: {failure.message}\n"}
    values: dict[str, Any] = {f: getattr(row, f) for f in RESULT_FIELDS}
    values["errors"] = [*(row.errors or []), entry]
    values["finished_at"] = write.state_changed if write.state == "failed" else None
    values["return_value"] = None
    return values


def _retry_delay(row: StatorTask) -> float:
    """The backoff rule from the backend's ``retry_after``, capped at an hour (or at
    ``retry_after`` if longer), counting this row's attempts so far."""
    options = task_backends[row.backend].options
    first = float(options.get("retry_after", DEFAULT_RETRY_AFTER))
    return _backoff.delay(len(row.worker_ids), first, MAX_RETRY_AFTER)


def _save(row: StatorTask, started: TaskResult, status: TaskResultStatus | None) -> None:
    """Record the attempt on the row and, once the task is over (``status``), say
    ``task_finished`` with the result of ``task_started`` brought up to date.

    The record is handed to the engine, which writes it with the row's transition in its
    batched, fenced write (see ``StatorTask.stator_write_columns``)."""
    row.stator_extra = {f: getattr(row, f) for f in RESULT_FIELDS}
    if status is None:
        return
    finished = _finished(
        started, status, row.finished_at, [TaskError(**e) for e in row.errors],
        row.return_value if status == TaskResultStatus.SUCCESSFUL else None,
    )
    task_finished.send(StatorBackend, task_result=finished)


# ``started`` brought up to date (``_save``), as ``dataclasses.replace`` would make it but
# at a third of its cost: the arguments were normalised when ``started`` was built, so
# ``TaskResult.__post_init__`` (which only normalises them) is not run again.
_finished = replacer("status", "finished_at", "errors", "_return_value")
