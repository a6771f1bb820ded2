"""The admin: ``StatorAdmin`` for your StatorModels, and pages for Stator's workers and errors.

``class OrderAdmin(StatorAdmin, admin.ModelAdmin)`` adds a state column and filter, the graph
drawn on the change page (inline SVG from :mod:`stator._graph_svg`, the dashboard's drawing, with
the row's state marked; no script, no CDN), its text below it to copy (Mermaid by default,
``stator_graph_format = "dot"`` for Graphviz), and actions: "Retry now" (rows waiting for a
retry become due at once) and "Move to <state>" for each state, through the graph's edges
only (rows in a state with no edge to the target are left alone and counted).

The actions are the dashboard's own row operations (``stator._store._operator_actions``), not a
second version of them: each row is one fenced transaction that applies only if the row is
still in the state, with the due time, the operator saw (a move asks first, on a page that
shows them and carries them), appends to the history, writes Stator's action log and wakes
the workers.  They need the model's change permission (a staff user who may only view the
rows sees no action), and each row they change gets an entry in Django's admin log too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from .._clock import SystemClock
from .._graph import State, StateGraph, role
from .._graph_text import to_dot, to_mermaid
from ..errors import TransitionConflict, TransitionError
from . import (
    _schedule_admin,  # noqa: F401  (registers the schedules page)
    _task_admin,  # noqa: F401  (registers the tasks page)
)
from ._admin_support import admin_actor, refuse_unpermitted_action, store_for
from ._ops_models import StatorError, StatorWorker
from ._stator_model import engine_owned_fields

SHRINK = 0.75

# The drawing's styles, scoped to it, in the admin's own colour variables (so its light and
# dark themes both apply) with fallbacks; role colours are translucent, readable on either.
# A wide graph shrinks to the field's width, down to SHRINK of its size, then scrolls in its
# box (the field's flex item may get narrower than the drawing).
GRAPH_CSS = """
div.readonly:has(> .stator-graph) { min-width: 0; }
.stator-graph .stator-graph-box { overflow-x: auto; width: fit-content; max-width: 100%;
  margin: .3rem 0 .5rem;
  border: 1px solid var(--hairline-color, #e8e8e8); border-radius: 4px;
  background: var(--body-bg, #fff); }
.stator-graph svg.graph { display: block; max-width: 100%; height: auto; }
.stator-graph svg.graph text { font: 13px var(--font-family-primary, system-ui, sans-serif);
  fill: var(--body-fg, #333); }
.stator-graph svg.graph .node rect { fill: rgba(47, 111, 223, .12); stroke: #7f9bd1;
  stroke-width: 1.5; }
.stator-graph svg.graph .node.initial rect { stroke-width: 2.5; }
.stator-graph svg.graph .node.terminal rect { fill: rgba(46, 139, 87, .15); stroke: #2e8b57; }
.stator-graph svg.graph .node.exhausted rect { fill: rgba(192, 57, 43, .13);
  stroke: var(--error-fg, #ba2121); }
.stator-graph svg.graph .node.external rect { fill: rgba(183, 121, 31, .15);
  stroke: #b7791f; }
.stator-graph svg.graph .node .name { font-weight: 600; }
.stator-graph svg.graph .node .count { fill: var(--body-quiet-color, #666); font-size: 11px; }
.stator-graph svg.graph .node.current rect { fill: var(--selected-row, #ffc);
  stroke: var(--link-fg, #417893); stroke-width: 3.5; }
.stator-graph svg.graph .node.current .name { font-weight: 700; }
.stator-graph svg.graph .node.current .count { fill: var(--link-fg, #417893);
  font-weight: 600; }
.stator-graph svg.graph .edge path { fill: none; stroke: var(--body-quiet-color, #666);
  stroke-width: 1.4; }
.stator-graph svg.graph .edge.timed path { stroke-dasharray: 5 3; }
.stator-graph svg.graph .edge.exhausted path { stroke: var(--error-fg, #ba2121); }
.stator-graph svg.graph .edge .rate, .stator-graph svg.graph .edge .label {
  fill: var(--body-quiet-color, #666); font-size: 11px; }
.stator-graph svg.graph .edge.exhausted .label { fill: var(--error-fg, #ba2121); }
.stator-graph svg.graph .node .inner { fill: none; stroke: #7f9bd1; stroke-width: 1; }
.stator-graph svg.graph .node.terminal .inner { stroke: #2e8b57; }
.stator-graph svg.graph .node.exhausted .inner { stroke: var(--error-fg, #ba2121); }
.stator-graph svg.graph .legend { fill: var(--body-quiet-color, #666); font-size: 11px; }
.stator-graph svg.graph marker path { fill: var(--body-quiet-color, #666); }
.stator-graph svg.graph marker path.arrow-exhausted { fill: var(--error-fg, #ba2121); }
.stator-graph pre { white-space: pre; overflow-x: auto; }
"""


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
        owned = engine_owned_fields(self.model)  # the engine's alone: never in a form
        extra = [c for c in (*owned, "state_graph_diagram") if c not in fields]
        return [*fields, *extra]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        """The add page leaves out the engine's fields: a new row takes their database
        defaults (the initial state, due now), which have no value to show yet."""
        fields = list(super().get_fields(request, obj))  # type: ignore[misc]
        owned = set(engine_owned_fields(self.model))
        return fields if obj is not None else [f for f in fields if f not in owned]

    @admin.display(description="state graph")
    def state_graph_diagram(self, obj: Any) -> SafeString:
        graph: type[StateGraph] = self.model.state_graph
        return state_graph_html(graph, getattr(obj, "state", None), self.stator_graph_format)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        refuse_unpermitted_action(self, request, "stator_")
        return super().changelist_view(request, extra_context)  # type: ignore[misc]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        graph: type[StateGraph] = self.model.state_graph
        movers = [_mover(s) for s in graph.states.values() if s.parents]
        self.actions = [*(getattr(self, "actions", None) or []), stator_retry_now, *movers]


def state_graph_html(graph: type[StateGraph], current: str | None,
                     text_format: str = "mermaid") -> SafeString:
    """The change page's graph: the drawing with ``current`` marked, and its text to copy.

    The drawing's modules are imported here, not with the admin: their layout library
    (grandalf, with numpy) would otherwise load in every process of a project with the admin,
    ``runstator`` workers included."""
    from .._graph_layout import layout
    from .._graph_svg import extent, to_svg

    roles = {name: role(state) for name, state in graph.states.items()}
    captions = {**roles, **({current: "current state"} if current in roles else {})}
    svg = to_svg(graph, roles, current=current, captions=captions, rates=False)
    smallest = int(extent(layout(graph, rates=False))[0] * SHRINK)
    dot = text_format == "dot"
    where = (format_html("Currently in <b>{}</b>.", current) if current in roles
             else format_html("Currently in <b>{}</b>, not a state of {}.", current or "?",
                              graph.__name__))
    return format_html(
        '<div class="stator-graph"><style>{}</style><p>{}</p>'
        '<div class="stator-graph-box"><div style="min-width: {}px">{}</div></div>'
        '<details><summary>{} source</summary><pre class="stator-graph-source">{}</pre>'
        "</details></div>",
        mark_safe(GRAPH_CSS),  # a constant
        where,
        smallest,
        mark_safe(svg),  # to_svg escapes every name it writes
        "Graphviz dot" if dot else "Mermaid",
        (to_dot if dot else to_mermaid)([graph]),
    )


@admin.action(description="Retry now (make waiting rows due at once)", permissions=["change"])
def stator_retry_now(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> None:
    """Rows waiting for their next try become due now; their failure count stays, so a
    failing row keeps its backoff.  A row whose handler runs at this moment loses its lease
    (its result will be refused by the fence) and runs again."""
    graph: type[StateGraph] = queryset.model.state_graph
    automatic = [s.name for s in graph.states.values() if s.automatic]
    from .._store import _operator_actions  # the admin's modules load everywhere

    store, t = store_for(queryset.db, queryset.model)
    now, actor = SystemClock().now(), admin_actor(request)
    done = changed = 0
    for row in queryset.filter(state__in=automatic, state_next__isnull=False):
        try:
            _operator_actions.retry_now(store, t, row.pk, row.state, row.state_next, now, actor)
        except TransitionConflict:
            changed += 1
            continue
        modeladmin.log_change(request, row, f"Stator: retry now ({row.state}, due at once)")
        done += 1
    modeladmin.message_user(request, f"{done} row(s) due now.", messages.SUCCESS)
    _say_changed(modeladmin, request, changed)


def _mover(target: State) -> Callable[[Any, HttpRequest, QuerySet[Any]], HttpResponse | None]:
    def move(
        modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]
    ) -> HttpResponse | None:
        movable = queryset.filter(state__in=sorted(target.parents))
        if request.POST.get("post") != "yes":
            return _confirm_move(modeladmin, request, queryset, movable, target, move.__name__)
        seen = _seen_rows(request.POST.getlist("stator_seen"))
        from .._store import _operator_actions  # the admin's modules load everywhere

        store, t = store_for(queryset.db, queryset.model)
        now, actor = SystemClock().now(), admin_actor(request)
        moved = changed = 0
        for row in queryset:
            if str(row.pk) not in seen:  # selected, but not shown on the confirmation page
                continue
            seen_state, seen_next = seen[str(row.pk)]
            try:
                _operator_actions.move_row(store, t, row.pk, seen_state, seen_next, target.name,
                                           now, actor)
            except TransitionConflict:
                changed += 1
                continue
            except TransitionError:
                continue  # no edge from the state shown: counted as left alone below
            modeladmin.log_change(request, row, f"Stator: moved from {seen_state} to "
                                  f"{target.name}")
            moved += 1
        _say_moved(modeladmin, request, target, moved, queryset.count() - moved - changed)
        _say_changed(modeladmin, request, changed)
        return None

    move.__name__ = f"stator_move_to_{target.name}"
    return admin.action(description=f"Move to state {target.name}", permissions=["change"])(move)


def _confirm_move(
    modeladmin: Any, request: HttpRequest, chosen: QuerySet[Any], movable: QuerySet[Any],
    target: State, action: str,
) -> HttpResponse | None:
    """The page that asks before moving, showing each row's state and due time; its form
    carries them back, so a row that moved meanwhile is left alone (the fence)."""
    rows = [
        {"obj": row, "state": row.state, "state_next": row.state_next,
         "seen": json.dumps([str(row.pk), row.state,
                             row.state_next.isoformat() if row.state_next else None])}
        for row in movable
    ]
    if not rows:
        _say_moved(modeladmin, request, target, 0, chosen.count())
        return None
    opts = modeladmin.model._meta
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"Move to state {target.name}?", "opts": opts, "rows": rows,
        "target": target.name, "left_alone": chosen.count() - len(rows), "action": action,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "sources": ", ".join(sorted(target.parents)),
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(request, "stator/admin/confirm_move.html", context)


def _seen_rows(values: Iterable[str]) -> dict[str, tuple[str, datetime | None]]:
    """The confirmation page's rows: primary key (as text) -> (state, due time) shown.
    Anything malformed is dropped: that row is then left alone."""
    seen: dict[str, tuple[str, datetime | None]] = {}
    for value in values:
        try:
            pk, state, due = json.loads(value)
            from .._store._dashboard import parse_time  # the admin's modules load everywhere

            when = None if due is None else parse_time(due)  # aware, in range
        except (ValueError, TypeError, RecursionError):
            continue
        if isinstance(pk, str) and isinstance(state, str):
            seen[pk] = (state, when)
    return seen


def _say_moved(modeladmin: Any, request: HttpRequest, target: State, moved: int,
               left: int) -> None:
    modeladmin.message_user(request, f"{moved} row(s) moved to {target.name}.",
                            messages.SUCCESS if moved else messages.WARNING)
    if left > 0:
        sources = ", ".join(sorted(target.parents)) or "none"
        modeladmin.message_user(
            request, f"{left} row(s) left alone: only rows in {sources} may move to "
            f"{target.name}.", messages.WARNING,
        )


def _say_changed(modeladmin: Any, request: HttpRequest, changed: int) -> None:
    if changed:
        modeladmin.message_user(
            request, f"{changed} row(s) changed since they were shown and were left alone; "
            "reload and try again.", messages.WARNING,
        )


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

