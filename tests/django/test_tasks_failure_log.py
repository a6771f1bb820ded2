"""A failing task is a failure like any other: each failed attempt is one WARNING line of the
worker's (its traceback once, not again in Django's own ``task_finished`` line), recorded in
Stator's errors and counted by ``stator status``; the task's own ``max_attempts`` and
backoff still decide what follows."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

pytest.importorskip("django.tasks", reason="the task backend needs Django >= 6.0")

import tasks_jobs
from django.tasks import TaskResultStatus
from task_settings import stator_tasks

from stator.django._setup import build_stator
from stator.django._task_model import StatorTask

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "pg"]),
    pytest.mark.parametrize("alias", ["default", "pg"]),
]


@pytest.fixture
def tasks(alias: str) -> Iterator[str]:
    """Three attempts, retried almost at once (so a worker run until idle does them all)."""
    with stator_tasks(alias, concurrency=1, max_attempts=3, retry_after=0.01):
        yield alias


def test_each_failed_attempt_is_one_warning_and_counted(
    tasks: str, caplog: pytest.LogCaptureFixture,
) -> None:
    result = tasks_jobs.fail.enqueue("no stock")
    caplog.set_level(logging.DEBUG)
    stator = build_stator(models=[StatorTask], alias=tasks, concurrency=1)
    # Stator's error log outlives a test's tables: count from what earlier tests left in it.
    [before] = stator.status()["models"]
    summary = stator.worker(until_idle=True, idle_window=0.5).run()
    assert summary.reason == "idle"
    done = tasks_jobs.fail.get_result(result.id)
    assert done.status == TaskResultStatus.FAILED and done.attempts == 3

    warned = [r for r in caplog.records
              if r.levelno >= logging.WARNING and r.name.startswith("stator")]
    assert [r.getMessage().split(":")[0].endswith(f"failed (attempt {n})")
            for n, r in enumerate(warned, 1)] == [True, True, True], \
        [r.getMessage() for r in warned]
    assert all("ValueError: no stock" in r.getMessage() for r in warned)
    # The traceback once in the log (the first of the worker's lines; DEBUG aside), never
    # twice.
    shown = [r for r in caplog.records if r.levelno >= logging.INFO
             and "Traceback (most recent call last)" in r.getMessage()
             + (logging.Formatter().formatException(r.exc_info) if r.exc_info else "")]
    assert shown == warned[:1]
    [django_line] = [r for r in caplog.records if r.name == "django.tasks"
                     and r.levelno == logging.ERROR]
    assert "FAILED" in django_line.getMessage() and not django_line.exc_info

    report = stator.status()
    [model] = report["models"]
    assert model["recent"]["errors"] - before["recent"]["errors"] == 3
    errors = [e for e in report["errors"] if e["row_pk"] == str(result.id)]
    assert sorted(e["attempt"] for e in errors) == [1, 2, 3]
    assert all(e["message"] == "ValueError: no stock" for e in errors)
