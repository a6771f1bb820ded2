"""The admin page for tasks: the list (status, queue, attempts), a failed task's errors with
their tracebacks, and "run again"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the task backend needs Django >= 6.0")

import tasks_jobs
from django.test import override_settings

from stator import ManualClock
from stator.django._setup import build_stator
from stator.django._task_model import StatorTask

TASKS = {"default": {"BACKEND": "stator.django.tasks.StatorBackend",
                     "QUEUES": ["default", "mail"]}}


@pytest.mark.django_db(transaction=True)
@override_settings(TASKS=TASKS)
def test_task_admin_lists_tasks_shows_errors_and_runs_again(admin_client: Any) -> None:
    clock = ManualClock(datetime.now(UTC) + timedelta(seconds=1))
    failed = tasks_jobs.fail.enqueue("the remote said no")
    done = tasks_jobs.add.enqueue(2, 3)
    stator = build_stator(models=[StatorTask], clock=clock)
    for _ in range(3):
        stator.run_once()

    listing = admin_client.get("/admin/stator/statortask/")
    assert listing.status_code == 200
    page = listing.content.decode()
    assert "FAILED" in page and "SUCCESSFUL" in page and "tasks_jobs.fail" in page

    detail = admin_client.get(f"/admin/stator/statortask/{failed.id}/change/")
    assert detail.status_code == 200
    text = detail.content.decode()
    assert "builtins.ValueError" in text and "the remote said no" in text

    response = admin_client.post("/admin/stator/statortask/", {
        "action": "run_again", "_selected_action": [failed.id, done.id],
    })
    assert response.status_code == 302
    copies = StatorTask.objects.exclude(pk__in=[failed.id, done.id])
    assert sorted(copies.values_list("task_path", "state")) == [
        ("tasks_jobs.add", "ready"), ("tasks_jobs.fail", "ready"),
    ]
