"""The settings the task tests run under: Stator's backend with the queues ``default`` and
``mail``, its tasks stored in one database alias."""

from __future__ import annotations

from typing import Any

from django.test import override_settings

BACKEND = "stator.django.tasks.StatorBackend"


def stator_tasks(alias: str, *, concurrency: int = 2, **options: Any) -> Any:
    """``override_settings`` for Stator's task backend (``options`` its OPTIONS), usable as
    a context manager or a decorator."""
    return override_settings(
        TASKS={"default": {"BACKEND": BACKEND, "QUEUES": ["default", "mail"],
                           "OPTIONS": options}},
        STATOR={"CONCURRENCY": concurrency, "DATABASE": alias},
    )
