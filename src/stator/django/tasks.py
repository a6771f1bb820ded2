"""``StatorBackend``: Django's task framework (``django.tasks``, Django >= 6.0) on Stator.

Settings::

    TASKS = {"default": {"BACKEND": "stator.django.tasks.StatorBackend",
                         "QUEUES": ["default", "mail"], "OPTIONS": {"max_attempts": 3}}}

A task is a row of ``StatorTask`` (table ``stator_tasks``) in the project's own database,
inserted in the caller's transaction: a rolled-back ``transaction.atomic()`` leaves no task,
and a task enqueued by a Stator handler commits with that handler's transition.
``manage.py runstator`` runs the tasks with every other Stator model.

OPTIONS: ``max_attempts`` (1: no retry; failed attempts back off exponentially from
``retry_after``, 10 s), ``keep_results`` (seconds or a timedelta, 7 days; None keeps them),
``timeout`` (seconds a task may run, 30; its lease is twice that), ``max_arguments_bytes``
(the largest arguments' JSON ``enqueue`` accepts, in UTF-8 bytes; 1 MiB; None: no limit).

Arguments the database could not store (a NUL character, a lone surrogate, NaN or infinity)
or over ``max_arguments_bytes`` are refused by ``enqueue`` with ``ValueError``, as Django
refuses values JSON cannot hold (``TypeError`` for a type, ``ValueError`` for a value),
before anything is sent to the database: the caller's transaction stays usable.

A row whose task cannot be loaded any more (its function renamed or removed, its module
failing to import, a path that is no task) still reads as a result: ``get_result`` returns it
with its status and errors, its ``task`` a stand-in (see ``unavailable_task``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import traceback
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

if importlib.util.find_spec("django.tasks") is None:  # pragma: no cover - Django 5.2
    raise ImportError(
        "stator.django.tasks needs Django >= 6.0 (django.tasks); `manage.py check` says more"
    )

from asgiref.sync import sync_to_async
from django.apps import apps
from django.core import checks
from django.db import connections, transaction
from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.module_loading import import_string

from .._store._dialects import django_dialect
from .._store._tasks import MAX_ARGUMENTS_BYTES, check_arguments, insert_params, insert_sql
from ._settings import stator_settings
from ._task_options import limit_problems, limit_warnings

if TYPE_CHECKING:
    from ._task_model import StatorTask

_INSERTS: dict[tuple[str, bool], str] = {}


class StatorBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.max_attempts = int(self.options.get("max_attempts", 1))
        limit = self.options.get("max_arguments_bytes", MAX_ARGUMENTS_BYTES)
        # A bad value fails ``manage.py check`` (E024); meanwhile the default applies.
        self.max_arguments_bytes: int | None = (
            limit if limit is None or _whole_bytes(limit) else MAX_ARGUMENTS_BYTES
        )

    # -- enqueue ---------------------------------------------------------------------------

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        result = self._new_result(task, args, kwargs)
        self._store(task, result)
        return result

    async def aenqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        result = self._new_result(task, args, kwargs)
        await sync_to_async(self._store)(task, result)  # on the thread of the async ORM
        return result

    def _new_result(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        # TaskResult refuses arguments JSON cannot hold, with Django's own error; then the
        # values PostgreSQL would refuse (aborting the caller's transaction) and the size.
        result = _result(
            task, uuid.uuid4().hex, TaskResultStatus.READY, self.alias, args, kwargs,
            enqueued_at=timezone.now(),
        )
        check_arguments(result.args, result.kwargs, self.max_arguments_bytes)
        return result

    def _store(self, task: Task, result: TaskResult) -> None:
        """Insert the task's row through the caller's connection, so it joins the caller's
        transaction; ``task_enqueued`` is sent once that commits."""
        values: dict[str, Any] = {
            "id": result.id, "task_path": task.module_path, "queue_name": task.queue_name,
            "priority": task.priority, "backend": self.alias,
            "args_kwargs": {"args": result.args, "kwargs": result.kwargs},
            "run_after": task.run_after, "max_attempts": self.max_attempts,
            "enqueued_at": result.enqueued_at, "errors": [], "worker_ids": [],
        }
        if task.run_after is not None:
            values["state_next"] = task.run_after  # due then, not at once
        using = _database()
        conn = connections[using]
        dialect = django_dialect(conn.vendor)
        key = (conn.vendor, task.run_after is not None)
        sql = _INSERTS.get(key)
        if sql is None:
            sql = _INSERTS[key] = insert_sql(_task_model()._meta.db_table, dialect, key[1])
        with conn.cursor() as cursor:
            cursor.execute(sql, insert_params(values, dialect))
        self._announce(result, using)

    def _announce(self, result: TaskResult, using: str) -> None:
        """``task_enqueued`` once the task is committed (at once outside a transaction), so a
        rolled-back enqueue announces nothing."""
        transaction.on_commit(
            lambda: task_enqueued.send(type(self), task_result=result), using=using,
        )

    # -- results ---------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        model = _task_model()
        try:
            return result_from_row(model.objects.using(_database()).get(pk=result_id))
        except model.DoesNotExist:
            raise TaskResultDoesNotExist(result_id) from None

    async def aget_result(self, result_id: str) -> TaskResult:
        model = _task_model()
        try:
            row = await model.objects.using(_database()).aget(pk=result_id)
        except model.DoesNotExist:
            raise TaskResultDoesNotExist(result_id) from None
        return result_from_row(row)

    # -- checks ----------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        found: list[checks.CheckMessage] = list(super().check(**kwargs))
        if not apps.is_installed("stator.django"):
            found.append(checks.Error(
                f"TASKS[{self.alias!r}] uses StatorBackend, but the stator app is not installed.",
                hint="Add 'stator.django' to INSTALLED_APPS and run `manage.py migrate`.",
                id="stator.E021",
            ))
        max_attempts = self.options.get("max_attempts", 1)
        if not isinstance(max_attempts, int) or max_attempts < 1:
            found.append(checks.Error(
                f"TASKS[{self.alias!r}]['OPTIONS']['max_attempts'] must be a whole number "
                f">= 1, not {max_attempts!r}.",
                id="stator.E022",
            ))
        limit = self.options.get("max_arguments_bytes", MAX_ARGUMENTS_BYTES)
        if limit is not None and not _whole_bytes(limit):
            found.append(checks.Error(
                f"TASKS[{self.alias!r}]['OPTIONS']['max_arguments_bytes'] must be a whole "
                f"number of bytes >= 1 or None, not {limit!r}.",
                id="stator.E024",
            ))
        for name in ("QUEUE_LIMITS", "TASK_LIMITS"):
            found.extend(
                checks.Error(f"TASKS[{self.alias!r}] {problem}.", id="stator.E025")
                for problem in limit_problems(name, self.options.get(name))
            )
            found.extend(
                checks.Warning(f"TASKS[{self.alias!r}] {problem}: it limits nothing.",
                               id="stator.W025")
                for problem in limit_warnings(name, self.options.get(name), self.queues)
            )
        for name in ("keep_results", "timeout", "retry_after"):
            value = self.options.get(name)
            if value is not None and not isinstance(value, int | float | timedelta):
                found.append(checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS'][{name!r}] must be seconds or a "
                    f"timedelta, not {value!r}.",
                    id="stator.E023",
                ))
        return found


def _whole_bytes(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _database() -> str:
    """Tasks live in the database the workers run (``STATOR["DATABASE"]``)."""
    return str(stator_settings()["DATABASE"])


def _task_model() -> type[StatorTask]:
    """The task model, from the app registry.  Django loads this backend whenever a task is
    declared, possibly while apps are still loading, and the model's handler runs tasks
    through this module: the model is looked up when a task is stored or read, not imported."""
    return cast("type[StatorTask]", apps.get_model("stator", "StatorTask"))


def result_from_row(
    row: StatorTask, status: str | None = None, task: Task | None = None
) -> TaskResult:
    """The ``TaskResult`` a row stands for; ``status`` overrides the one its state gives.

    Never fails for want of the task itself: a path that no longer leads to one gives a
    stand-in (``unavailable_task``), so results pages and ``get_result`` keep working."""
    if task is None:
        try:
            task = _task(row.task_path, row.priority, row.queue_name, row.run_after, row.backend)
        except Exception as exc:
            task = unavailable_task(row, exc)
    arguments = row.args_kwargs
    state = TaskResultStatus(status or row.status)
    return assembled(
        task=task, id=row.id, status=state, backend=row.backend,
        # Read from JSON, so already what TaskResult's normalize_json would make of them.
        args=list(arguments["args"]), kwargs=dict(arguments["kwargs"]),
        enqueued_at=row.enqueued_at, started_at=row.started_at, finished_at=row.finished_at,
        last_attempted_at=row.last_attempted_at,
        errors=[TaskError(**e) for e in row.errors], worker_ids=list(row.worker_ids),
        _return_value=row.return_value if state == TaskResultStatus.SUCCESSFUL else None,
    )


TASK_RESULT_FIELDS = tuple(f.name for f in dataclasses.fields(TaskResult))


def _result_makers() -> tuple[Callable[..., TaskResult], Callable[..., Callable[..., TaskResult]]]:
    """``assembled`` and ``replacer``, written out for ``TaskResult``'s fields: one slot
    store per field, no loop and no dict, at a third of the cost of a loop of
    ``object.__setattr__`` (they run twice per task).  A ``TaskResult`` without slots (a
    Django to come) gets the same functions with ``object.__setattr__``."""
    fields = TASK_RESULT_FIELDS
    slots = all(type(TaskResult.__dict__.get(f)).__name__ == "member_descriptor" for f in fields)
    scope: dict[str, Any] = {"new": object.__new__, "TaskResult": TaskResult,
                             "setattr_": object.__setattr__}
    if slots:
        scope.update({f"set_{i}": TaskResult.__dict__[f].__set__ for i, f in enumerate(fields)})
        stores = "".join(f"    set_{i}(result, {f})\n" for i, f in enumerate(fields))
    else:  # pragma: no cover - Django's TaskResult has slots
        stores = "".join(f"    setattr_(result, {f!r}, {f})\n" for f in fields)
    source = (f"def assembled(*, {', '.join(fields)}):\n    result = new(TaskResult)\n"
              f"{stores}    return result\n")
    exec(source, scope)  # our own text, from the dataclass's field names
    made: Callable[..., TaskResult] = scope["assembled"]

    def replacer(*names: str) -> Callable[..., TaskResult]:
        """A function of (result, *values for ``names``) to ``result`` with those fields
        replaced, as ``dataclasses.replace`` would make it without ``__post_init__``."""
        keywords = ", ".join(f"{f}={f if f in names else f'result.{f}'}" for f in fields)
        text = (f"def replaced(result, {', '.join(names)}):\n"
                f"    return assembled({keywords})\n")
        local: dict[str, Any] = {"assembled": made}
        exec(text, local)
        replaced: Callable[..., TaskResult] = local["replaced"]
        return replaced

    return made, replacer


assembled, replacer = _result_makers()
assembled.__doc__ = """The ``TaskResult`` of keyword arguments (every field), as its
constructor makes it from arguments and keyword arguments that are JSON values already:
``__post_init__`` only passes them through ``normalize_json``, which would copy them to the
same values.  Twice per task run, where the constructor cost more than the rest of the
result."""


@functools.lru_cache(maxsize=1024)
def _task(
    path: str, priority: int, queue_name: str, run_after: datetime | None, backend: str
) -> Task:
    """The task a row names, as it was enqueued (looked up and validated once per variant:
    ``Task.using`` inspects the function's signature)."""
    return load_task(path).using(
        priority=priority, queue_name=queue_name, run_after=run_after, backend=backend,
    )


def load_task(path: str) -> Task:
    """The task at ``path``; ``ImportError`` (or whatever its module raises) if it does not
    load, ``InvalidTask`` if what is there is no task."""
    task = import_string(path)
    if not isinstance(task, Task):
        raise InvalidTask(f"{path} is not a task ({type(task).__name__})")
    return task


def unavailable_task(row: StatorTask, error: BaseException) -> Task:
    """A stand-in for the task of a row whose path no longer loads one: its ``module_path``
    is the row's, calling it raises ``InvalidTask``, and ``unavailable_error(task)`` is the
    error (class path and traceback) that made it unavailable.

    Built without ``Task``'s validation, which asks the backend the row names, and that
    backend may be gone too."""
    path = row.task_path
    module, _, name = path.rpartition(".")
    reason = f"{type(error).__name__}: {error}"

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise InvalidTask(f"task {path!r} cannot be loaded ({reason})")

    unavailable.__module__ = module
    unavailable.__name__ = unavailable.__qualname__ = name or path
    unavailable.stator_unavailable = task_error(error)  # type: ignore[attr-defined]
    task = object.__new__(Task)
    values = {"func": unavailable, "priority": row.priority, "backend": row.backend,
              "queue_name": row.queue_name, "run_after": row.run_after, "takes_context": False}
    for field, value in values.items():
        object.__setattr__(task, field, value)
    return task


def unavailable_error(task: Task) -> dict[str, str] | None:
    """Why ``task`` is a stand-in (``unavailable_task``); None for a real task."""
    return getattr(task.func, "stator_unavailable", None)


def task_error(exc: BaseException) -> dict[str, str]:
    """An exception as ``TaskResult.errors`` keeps it (``TaskError``'s fields)."""
    return {
        "exception_class_path": class_path(type(exc)),
        "traceback": "".join(traceback.format_exception(exc)),
    }


def class_path(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _result(
    task: Task, result_id: str, status: TaskResultStatus, backend: str, args: Any,
    kwargs: Any, **extra: Any,
) -> TaskResult:
    fields: dict[str, Any] = {
        "enqueued_at": None, "started_at": None, "finished_at": None,
        "last_attempted_at": None, "errors": [], "worker_ids": [],
    }
    fields.update(extra)
    return TaskResult(
        task=task, id=result_id, status=status, backend=backend, args=list(args),
        kwargs=dict(kwargs), **fields,
    )
