"""The admin page for tasks: the list (status, queue, attempts), a failed task's errors with
their tracebacks, and "run again"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the task backend needs Django >= 6.0")

import tasks_jobs
from django.contrib.admin.models import ADDITION, LogEntry
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client, override_settings

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


def _staff(*codenames: str) -> Client:
    user = User.objects.create_user("clerk", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db(transaction=True)
@override_settings(TASKS=TASKS)
def test_run_again_needs_the_add_permission_and_is_logged() -> None:
    """A staff user who may only view tasks cannot run a finished one (a payment, say) again;
    with the add permission each copy is written in both logs, in its enqueue's transaction."""
    connection.cursor().execute("DELETE FROM stator_actions")  # not a model: never flushed
    clock = ManualClock(datetime.now(UTC) + timedelta(seconds=1))
    paid = tasks_jobs.add.enqueue(2, 3)
    build_stator(models=[StatorTask], clock=clock).run_once()
    post = {"action": "run_again", "_selected_action": [paid.id], "index": 0}
    viewer = _staff("view_statortask")
    assert "run_again" not in viewer.get("/admin/stator/statortask/").content.decode()
    assert viewer.post("/admin/stator/statortask/", post).status_code == 403
    assert StatorTask.objects.count() == 1 and not LogEntry.objects.exists()
    User.objects.all().delete()
    clerk = _staff("view_statortask", "add_statortask")
    assert "run_again" in clerk.get("/admin/stator/statortask/").content.decode()
    clerk.post("/admin/stator/statortask/", post)
    copy = StatorTask.objects.exclude(pk=paid.id).get()
    [entry] = LogEntry.objects.all()
    assert entry.action_flag == ADDITION and entry.object_id == copy.pk
    with connection.cursor() as cursor:
        cursor.execute("SELECT actor, action, row_pk, detail FROM stator_actions")
        assert cursor.fetchall() == [("admin:clerk", "run_again", copy.pk, f"again: {paid.id}")]


@pytest.mark.django_db(transaction=True)
@override_settings(TASKS=TASKS)
def test_task_admin_shows_and_skips_a_task_that_cannot_be_loaded(admin_client: Any) -> None:
    """A task renamed since it ran: its page shows the import error, "run again" enqueues
    the others and says which it could not (no 500)."""
    clock = ManualClock(datetime.now(UTC) + timedelta(seconds=1))
    gone = tasks_jobs.add.enqueue(1, 1)
    StatorTask.objects.filter(pk=gone.id).update(task_path="tasks_jobs.renamed_since")
    done = tasks_jobs.add.enqueue(2, 3)
    stator = build_stator(models=[StatorTask], clock=clock)
    for _ in range(3):
        stator.run_once(raise_errors=False)

    detail = admin_client.get(f"/admin/stator/statortask/{gone.id}/change/")
    assert detail.status_code == 200
    assert "builtins.ImportError" in detail.content.decode()

    response = admin_client.post("/admin/stator/statortask/", {
        "action": "run_again", "_selected_action": [gone.id, done.id],
    }, follow=True)
    assert response.status_code == 200
    assert "1 task(s) not enqueued" in response.content.decode()
    copies = StatorTask.objects.exclude(pk__in=[gone.id, done.id])
    assert list(copies.values_list("task_path", flat=True)) == ["tasks_jobs.add"]
