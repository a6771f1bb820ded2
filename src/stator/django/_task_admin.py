"""The admin page for tasks: status, queue, priority, attempts, errors and result.

Registered by ``stator.django.admin`` (which Django's admin autodiscovery imports).  Tasks
are read-only here except for two actions: "run again" re-enqueues finished tasks as new
ones (it adds tasks: it needs the add permission on tasks, though the add form stays off),
and deleting removes them.  Each task run again is written in Django's admin log and in
Stator's action log, in the transaction that enqueues it.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_permission_codename
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from .._clock import SystemClock
from ._admin_support import admin_actor, refuse_unpermitted_action, store_for
from ._task_model import StatorTask


@admin.register(StatorTask)
class StatorTaskAdmin(admin.ModelAdmin):
    list_display = (
        "id", "task_path", "queue_name", "status", "priority", "attempts", "enqueued_at",
        "finished_at",
    )
    list_filter = ("state", "queue_name", "backend", "task_path")
    search_fields = ("id", "task_path")
    ordering = ("-enqueued_at",)
    date_hierarchy = "enqueued_at"
    actions = ("run_again",)
    fields = (
        "id", "task_path", "status", "queue_name", "priority", "backend", "arguments",
        "run_after", "enqueued_at", "started_at", "last_attempted_at", "finished_at",
        "attempts", "max_attempts", "worker_ids", "result", "error_list", "state_next",
    )
    readonly_fields = fields

    @admin.display(description="status", ordering="state")
    def status(self, obj: StatorTask) -> str:
        return obj.status

    @admin.display(description="attempts")
    def attempts(self, obj: StatorTask) -> int:
        return len(obj.worker_ids)

    @admin.display(description="arguments")
    def arguments(self, obj: StatorTask) -> str:
        return json.dumps(obj.args_kwargs)

    @admin.display(description="return value")
    def result(self, obj: StatorTask) -> str:
        return json.dumps(obj.return_value) if obj.state == "successful" else "—"

    @admin.display(description="errors")
    def error_list(self, obj: StatorTask) -> str:
        if not obj.errors:
            return "—"
        return format_html_join(
            "", "<p><strong>{}</strong></p><pre>{}</pre>",
            ((e["exception_class_path"], e["traceback"]) for e in obj.errors),
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        refuse_unpermitted_action(self, request, "run_again")
        return super().changelist_view(request, extra_context)

    def has_run_again_permission(self, request: HttpRequest) -> bool:
        """Running a task again adds a task: Django's add permission on tasks."""
        codename = get_permission_codename("add", self.opts)
        return bool(request.user.has_perm(f"{self.opts.app_label}.{codename}"))

    @admin.action(description="Run again (enqueue a copy of each selected finished task)",
                  permissions=["run_again"])
    def run_again(self, request: HttpRequest, queryset: QuerySet[StatorTask]) -> None:
        # Django >= 6.0 only, as is running again; this page is registered on 5.2 too.
        from django.tasks import task_backends

        from .._store import _operator_actions  # the admin's modules load everywhere
        from .tasks import load_task

        store, t = store_for(queryset.db, StatorTask)
        actor = admin_actor(request)
        done = 0
        unavailable: list[str] = []
        for row in queryset.filter(state__in=["successful", "failed"]):
            try:  # a task renamed or removed since: say so, enqueue the others
                task = load_task(row.task_path).using(
                    priority=row.priority, queue_name=row.queue_name, backend=row.backend,
                )
            except Exception as exc:
                unavailable.append(f"{row.task_path} ({type(exc).__name__}: {exc})")
                continue
            with transaction.atomic(using=queryset.db):
                result = task_backends[row.backend].enqueue(
                    task, row.args_kwargs["args"], row.args_kwargs["kwargs"]
                )
                _operator_actions.record_action(store, SystemClock().now(), actor, "run_again",
                                         t.name, result.id, f"again: {row.pk}", 1)
            copy = StatorTask.objects.using(queryset.db).get(pk=result.id)
            self.log_addition(request, copy, f"Stator: run again of task {row.pk}")
            done += 1
        self.message_user(
            request, format_html("{} task(s) enqueued again.", done), messages.SUCCESS
        )
        if unavailable:
            self.message_user(request, format_html(
                "{} task(s) not enqueued: their task cannot be loaded: {}",
                len(unavailable), "; ".join(unavailable),
            ), messages.WARNING)
