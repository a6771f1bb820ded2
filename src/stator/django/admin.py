"""The admin: ``StatorAdmin`` for your StatorModels, and pages for Stator's workers and errors.

``class OrderAdmin(StatorAdmin, admin.ModelAdmin)`` adds a state column and filter, the graph
as a text diagram on the change page (Mermaid by default, ``stator_graph_format = "dot"``
for Graphviz), and actions: "Retry now" (rows waiting for a retry become due at once) and
"Move to <state>" for each state, through the graph's edges only (rows in a state with no
edge to the target are left alone and counted).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from .._diagram import to_dot, to_mermaid
from .._graph import State, StateGraph
from .._store._django import retry_now
from ._ops_models import StatorError, StatorWorker

STATOR_COLUMNS = ("state", "state_changed", "state_next", "state_attempts")


class StatorAdmin:
    """Mix into a ``ModelAdmin`` of a StatorModel (before ``admin.ModelAdmin``)."""

    stator_graph_format = "mermaid"
    model: Any

    def get_list_display(self, request: HttpRequest) -> Any:
        shown = list(super().get_list_display(request))  # type: ignore[misc]
        return [*shown, *(c for c in ("state", "state_changed") if c not in shown)]

    def get_list_filter(self, request: HttpRequest) -> Any:
        filters = list(super().get_list_filter(request))  # type: ignore[misc]
        return filters if "state" in filters else ["state", *filters]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))  # type: ignore[misc]
        extra = [c for c in (*STATOR_COLUMNS, "state_graph_diagram") if c not in fields]
        return [*fields, *extra]

    @admin.display(description="state graph")
    def state_graph_diagram(self, obj: Any) -> str:
        graph: type[StateGraph] = self.model.state_graph
        render = to_dot if self.stator_graph_format == "dot" else to_mermaid
        return format_html(
            '<p>Currently in <b>{}</b>.</p><pre class="stator-graph">{}</pre>',
            getattr(obj, "state", "?"), render([graph]),
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        graph: type[StateGraph] = self.model.state_graph
        movers = [_mover(s) for s in graph.states.values() if s.parents]
        self.actions = [*(getattr(self, "actions", None) or []), stator_retry_now, *movers]


@admin.action(description="Retry now (make waiting rows due at once)")
def stator_retry_now(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> None:
    count = retry_now(queryset)
    modeladmin.message_user(request, f"{count} row(s) due now.", messages.SUCCESS)


def _mover(target: State) -> Callable[[Any, HttpRequest, QuerySet[Any]], None]:
    def move(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        chosen = queryset.count()
        moved = queryset.transition_perform(target)
        modeladmin.message_user(request, f"{moved} row(s) moved to {target.name}.",
                                messages.SUCCESS if moved else messages.WARNING)
        if moved < chosen:
            sources = ", ".join(sorted(target.parents)) or "none"
            modeladmin.message_user(
                request, f"{chosen - moved} row(s) left alone: only rows in {sources} may "
                f"move to {target.name}.", messages.WARNING,
            )

    move.__name__ = f"stator_move_to_{target.name}"
    return admin.action(description=f"Move to state {target.name}")(move)


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(StatorWorker)
class StatorWorkerAdmin(_ReadOnly):
    list_display = ("id", "hostname", "pid", "alive", "concurrency", "model_names",
                    "started_at", "last_seen")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(boolean=True)
    def alive(self, obj: StatorWorker) -> bool:
        return obj.alive


@admin.register(StatorError)
class StatorErrorAdmin(_ReadOnly):
    list_display = ("created_at", "model", "row_pk", "state", "attempt", "kind", "short")
    list_filter = ("model", "kind", "state")
    search_fields = ("row_pk", "message")
    readonly_fields = ("created_at", "model", "row_pk", "state", "attempt", "kind",
                       "worker_id", "message", "traceback_text")
    fields = readonly_fields

    @admin.display(description="message")
    def short(self, obj: StatorError) -> str:
        return obj.message[:120]

    @admin.display(description="traceback")
    def traceback_text(self, obj: StatorError) -> str:
        return format_html("<pre>{}</pre>", obj.traceback)


from . import _task_admin  # noqa: E402,F401  (the tasks page)
