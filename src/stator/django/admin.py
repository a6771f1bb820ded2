"""The admin: ``StatorAdmin`` for your StatorModels, and pages for Stator's workers and errors.

``class OrderAdmin(StatorAdmin, admin.ModelAdmin)`` adds a state column and filter, the graph
drawn on the change page (inline SVG from :mod:`stator._drawing`, the dashboard's drawing, with
the row's state marked; no script, no CDN), its text below it to copy (Mermaid by default,
``stator_graph_format = "dot"`` for Graphviz), and actions: "Retry now" (rows waiting for a
retry become due at once) and "Move to <state>" for each state, through the graph's edges
only (rows in a state with no edge to the target are left alone and counted).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from .._diagram import to_dot, to_mermaid
from .._drawing import extent, layout, to_svg
from .._graph import State, StateGraph, role
from .._store._django import retry_now
from ._ops_models import StatorError, StatorWorker

STATOR_COLUMNS = ("state", "state_changed", "state_next", "state_attempts")
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
.stator-graph svg.graph .edge .rate { fill: var(--body-quiet-color, #666); font-size: 11px;
  paint-order: stroke; stroke: var(--body-bg, #fff); stroke-width: 4px;
  stroke-linejoin: round; }
.stator-graph svg.graph marker path { fill: var(--body-quiet-color, #666); }
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
        extra = [c for c in (*STATOR_COLUMNS, "state_graph_diagram") if c not in fields]
        return [*fields, *extra]

    @admin.display(description="state graph")
    def state_graph_diagram(self, obj: Any) -> SafeString:
        graph: type[StateGraph] = self.model.state_graph
        return state_graph_html(graph, getattr(obj, "state", None), self.stator_graph_format)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        graph: type[StateGraph] = self.model.state_graph
        movers = [_mover(s) for s in graph.states.values() if s.parents]
        self.actions = [*(getattr(self, "actions", None) or []), stator_retry_now, *movers]


def state_graph_html(graph: type[StateGraph], current: str | None,
                     text_format: str = "mermaid") -> SafeString:
    """The change page's graph: the drawing with ``current`` marked, and its text to copy."""
    roles = {name: role(state) for name, state in graph.states.items()}
    captions = {**roles, **({current: "current state"} if current in roles else {})}
    svg = to_svg(graph, roles, current=current, captions=captions, labels=True)
    smallest = int(extent(layout(graph))[0] * SHRINK)
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
