"""The task backend's ``OPTIONS`` as the project's settings give them, and their defaults.

A leaf that imports no model: the task model reads it to build its graph, and the code that
runs a task reads it for the retry delay.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

BACKEND_PATH = "stator.django.tasks.StatorBackend"
DEFAULT_KEEP_RESULTS = 7 * 24 * 3600.0
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRY_AFTER = 10.0
MAX_RETRY_AFTER = 3600.0  # the longest wait between two attempts of a task


def stator_backends() -> list[dict[str, Any]]:
    """The ``TASKS`` entries that use this backend (settings are loaded before any model)."""
    configured = getattr(settings, "TASKS", None) or {}
    return [p for p in configured.values() if p.get("BACKEND") == BACKEND_PATH]


def _seconds(value: Any, default: float | None) -> float | None:
    if value is None:
        return default
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


def option(name: str, default: float, *, none_is_forever: bool = False) -> float | None:
    """The largest value any Stator task backend sets for ``OPTIONS[name]``.

    The graph is a class, so its timings are fixed when it is created; with several Stator
    backends the most lenient value wins (results kept longest, longest timeout).  A backend
    that does not set it counts with ``default``; None is "for ever" if ``none_is_forever``
    (``keep_results``), else the default."""
    values = [
        _seconds((p.get("OPTIONS") or {}).get(name, default),
                 None if none_is_forever else default)
        for p in stator_backends()
    ]
    if not values:
        return default
    if any(v is None for v in values):
        return None
    return max(v for v in values if v is not None)


def queue_limits() -> dict[str, int]:
    """``OPTIONS["QUEUE_LIMITS"]`` of every Stator task backend, merged: at most this many
    tasks of a queue running at once, across every worker.  Read when a worker starts (not
    when the graph is made), so a limit can change with a restart.  Two backends naming one
    queue: the smaller limit holds, since both share the one table."""
    return _merged("QUEUE_LIMITS")


def task_limits() -> dict[str, int]:
    """``OPTIONS["TASK_LIMITS"]``, merged as ``queue_limits``: at most this many running
    tasks of a task path (``"app.tasks.send_mail"``), across every worker and queue."""
    return _merged("TASK_LIMITS")


def limit_problems(name: str, given: Any) -> list[str]:
    """What is wrong with a backend's ``OPTIONS[name]`` (``QUEUE_LIMITS``, ``TASK_LIMITS``):
    raised when a worker reads it, and reported by ``manage.py check`` (``stator.E025``)."""
    what = "queue names" if name == "QUEUE_LIMITS" else "task paths (module.function)"
    if given is None:
        return []
    if not isinstance(given, dict):
        return [f'OPTIONS["{name}"] must map {what} to numbers (got {given!r})']
    problems = []
    for key, most in given.items():
        if not isinstance(key, str) or not key:
            problems.append(f'OPTIONS["{name}"] must map {what} to numbers (got key {key!r})')
        elif name == "TASK_LIMITS" and "." not in key:
            problems.append(f'OPTIONS["{name}"][{key!r}] must be a task\'s dotted path, as '
                            f'task.module_path gives it (e.g. "app.tasks.send_mail")')
        if isinstance(most, bool) or not isinstance(most, int) or most < 1:
            problems.append(f'OPTIONS["{name}"][{key!r}] must be an int >= 1 (got {most!r})')
    return problems


def limit_warnings(name: str, given: Any, queues: set[str]) -> list[str]:
    """What in a well-formed ``OPTIONS[name]`` limits nothing: a queue this backend does not
    take (``queues``, its ``QUEUES``; empty takes any), a task path that names no task (a typo
    would leave the task unlimited without a word).  ``manage.py check`` (``stator.W025``)."""
    if limit_problems(name, given) or not given:
        return []
    if name == "QUEUE_LIMITS":
        return [f'OPTIONS["QUEUE_LIMITS"] names the queue {queue!r}, which is not in this '
                f"backend's QUEUES {sorted(queues)!r}" for queue in given
                if queues and queue not in queues]
    return [f'OPTIONS["TASK_LIMITS"] names {path!r}, which {why}' for path in given
            if (why := _not_a_task(path))]


def _not_a_task(path: str) -> str | None:
    """Why ``path`` names no task (``task.module_path``), or None when it does."""
    from django.tasks import Task
    from django.utils.module_loading import import_string

    try:
        found = import_string(path)
    except ImportError as exc:
        return f"cannot be imported ({exc})"
    if not isinstance(found, Task):
        return f"is not a task (a {type(found).__name__}; decorate it with @task)"
    if found.module_path != path:
        return f"is the task {found.module_path!r} under another name: limits use that path"
    return None


def _merged(name: str) -> dict[str, int]:
    limits: dict[str, int] = {}
    for backend in stator_backends():
        given = (backend.get("OPTIONS") or {}).get(name) or {}
        for problem in limit_problems(name, given):
            raise ImproperlyConfigured(f"TASKS {problem}")
        for key, most in given.items():
            limits[str(key)] = min(most, limits.get(str(key), most))
    return limits
