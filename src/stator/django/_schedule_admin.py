"""The admin page for schedules: when each fires, its last and next tick, what it last did,
and three actions, "run now", "pause" and "resume" (the change permission, like Stator's
other actions; each written in Django's admin log and in Stator's action log).

Registered by ``stator.django.admin``.  The rows follow ``STATOR["SCHEDULE"]``, so nothing
here adds, edits or deletes one.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from .._clock import SystemClock
from ..errors import ConfigError
from ._admin_support import admin_actor, refuse_unpermitted_action, store_for
from ._schedule_model import StatorSchedule

_SAID = {"run_now": "fires now", "pause": "paused", "resume": "resumed"}


def _act(action: str) -> Any:
    def run(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        from .._schedule_ops import schedule_action  # the admin's modules load everywhere

        store, _ = store_for(queryset.db, StatorSchedule)
        now, actor = SystemClock().now(), admin_actor(request)
        done = 0
        for row in queryset:
            if schedule_action(store.engine, row.pk, action, now, actor):
                said = action.replace("_", " ")
                modeladmin.log_change(request, row, f"Stator: schedule {said}")
                done += 1
        skipped = len(queryset) - done
        modeladmin.message_user(request, f"{done} schedule(s) {_SAID[action]}.",
                                messages.SUCCESS)
        if skipped:
            modeladmin.message_user(
                request, f"{skipped} schedule(s) left alone: not in a state this applies to, "
                "or changed meanwhile.", messages.WARNING)

    run.__name__ = f"schedule_{action}"
    label = {"run_now": "Run now", "pause": "Pause", "resume": "Resume"}[action]
    return admin.action(description=f"{label} (selected schedules)",
                        permissions=["change"])(run)


@admin.register(StatorSchedule)
class StatorScheduleAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "when", "state", "last_tick", "next_tick", "last_outcome",
                    "fired", "missed")
    list_filter = ("state", "kind")
    search_fields = ("name",)
    actions = (_act("run_now"), _act("pause"), _act("resume"))
    fields = ("name", "kind", "when", "state", "definition_text", "digest", "next_tick",
              "last_tick", "last_fired_at", "last_outcome", "fired", "missed", "updated_at")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        refuse_unpermitted_action(self, request, "schedule_")
        return super().changelist_view(request, extra_context)

    @admin.display(description="when")
    def when(self, obj: StatorSchedule) -> str:
        from .._schedule import from_definition  # the admin's modules load everywhere

        try:
            return from_definition(obj.name, json.loads(obj.definition)).when
        except (ValueError, ConfigError):
            return "(unreadable definition)"

    @admin.display(description="definition")
    def definition_text(self, obj: StatorSchedule) -> str:
        return obj.definition
