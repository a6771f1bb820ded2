"""The dashboard's read-only pages and their JSON twins: the overview, a model's graph, its
rows page by page, one row, the errors, and /metrics.  Every database read goes through
``_store._dashboard``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .._graph import role
from .._graph_svg import edge_key, node_key, to_svg
from .._graph_text import to_mermaid
from .._status_report import LIVE_AFTER
from .._store import TrackedModel, _dashboard
from . import _chart
from ._context import Dashboard
from ._format import age, figure

# What ``?done=`` may say after an action: a short code picks one of these fixed texts, so
# a link can never make the page say something of its own.
DONE = {
    "due": "made due now",
    "moved": "moved",
    "due-all": "row(s) made due now",
}


def page_routes(d: Dashboard) -> list[Route]:
    def overview(request: Request) -> Response:
        return d.page(request, "overview.html", **_overview(d))

    def overview_json(request: Request) -> Response:
        return JSONResponse(_overview_values(_overview(d)))

    def graph_page(request: Request) -> Response:
        t = d.tracked(request.path_params["model"])
        roles = {name: role(state) for name, state in t.graph.states.items()}
        return d.page(
            request, "graph.html", model=t.name, graph=t.graph.__name__,
            svg=to_svg(t.graph, roles), mermaid=to_mermaid([t.graph]),
            values=_graph_values(d, t),
        )

    def graph_json(request: Request) -> Response:
        t = d.tracked(request.path_params["model"])
        return JSONResponse({"values": _graph_values(d, t)})

    def rows_page(request: Request) -> Response:
        t = d.tracked(request.path_params["model"])
        q = request.query_params
        state = q.get("state") or None
        due, failing = q.get("due") == "1", q.get("failing") == "1"
        unknown = q.get("unknown") == "1"
        if state is not None and state not in t.graph.states:
            # A state the graph lacks (raw SQL, another tool): its rows are listed if any.
            try:
                _dashboard.storable_text(d.stator.store, state)
            except ValueError:
                raise HTTPException(404, f"{t.name} has no rows in {state!r}") from None
        try:
            page = _dashboard.list_rows(
                d.stator.store, t, d.stator.clock.now(), state=state, due=due,
                failing=failing, unknown=unknown, after=q.get("after"),
            )
        except ValueError:
            raise HTTPException(400, "not a cursor this dashboard made") from None
        if state is not None and state not in t.graph.states and not page.rows \
                and not (due or failing or "after" in q):
            raise HTTPException(
                404, f"{t.name} has no rows in {state!r}, which {t.graph.__name__} lacks")
        columns = [c.name for c in t.table.c if c.name != "state_history"]
        return d.page(
            request, "rows.html", model=t.name, states=list(t.graph.states), state=state,
            due=due, failing=failing, unknown=unknown, page=page, columns=columns, pk=t.pk,
            retryable=state in {s.name for s in t.graph.scheduled_states()},
            done=done_text(request),
        )

    def row_page(request: Request) -> Response:
        t, row = find_row(d, request)
        history = row.get("state_history")
        if isinstance(history, str):
            try:
                history = json.loads(history)
            except ValueError:
                history = [history]
        current = t.graph.states.get(row["state"])
        return d.page(
            request, "row.html", model=t.name, pk=row[t.pk], row=row,
            columns=[c.name for c in t.table.c if c.name != "state_history"],
            history=history or [], errors=_dashboard.row_errors(d.stator.store, t, row[t.pk]),
            targets=sorted(current.children) if current else [],
            retryable=bool(current and current.scheduled), done=done_text(request),
        )

    def errors_page(request: Request) -> Response:
        groups = _dashboard.error_groups(d.stator.store, list(d.by_name))
        return d.page(request, "errors.html", groups=groups,
                      recent=d.stator.store.recent_errors(limit=50, models=list(d.by_name)))

    def metrics(request: Request) -> Response:
        return Response(generate_latest(d.registry), media_type=CONTENT_TYPE_LATEST)

    return [
        Route("/", overview),
        Route("/api/overview.json", overview_json),
        Route("/metrics", metrics),
        Route("/errors", errors_page),
        Route("/models/{model}/graph", graph_page),
        Route("/api/models/{model}/graph.json", graph_json),
        Route("/models/{model}/rows", rows_page),
        Route("/models/{model}/rows/{pk:path}", row_page),
    ]


def done_text(request: Request) -> str | None:
    """The fixed text ``?done=CODE`` stands for (with its row count for ``due-all``)."""
    text = DONE.get(request.query_params.get("done", ""))
    if text is None:
        return None
    n = request.query_params.get("n", "")
    return f"{int(n)} {text}" if n.isdecimal() and len(n) < 10 else text


def find_row(d: Dashboard, request: Request) -> tuple[TrackedModel, dict[str, Any]]:
    t = d.tracked(request.path_params["model"])
    try:
        pk = _dashboard.parse_pk(d.stator.store, t, request.path_params["pk"])
    except ValueError:
        raise HTTPException(404, "no such row") from None
    row = _dashboard.get_row(d.stator.store, t, pk)
    if row is None:
        raise HTTPException(404, f"{t.name} has no row {pk!r}")
    return t, row


def _overview(d: Dashboard) -> dict[str, Any]:
    store, now = d.stator.store, d.stator.clock.now()
    counts = _dashboard.state_counts(store, now)
    speed = _dashboard.throughput(store, now)
    paused = _dashboard.paused_info(store)
    limits = _dashboard.limit_usage(store, now)
    models = []
    for t in store.tracked:
        scheduled = {s.name for s in t.graph.scheduled_states()}
        states = [{
            "state": c.state, "role": role(t.graph.states.get(c.state)),
            "rows": c.rows, "due": c.due,
            "oldest_due_seconds": (now - c.oldest_due).total_seconds() if c.oldest_due
            else None,
            "failing": c.failing, "estimated": c.estimated, "scheduled": c.state in scheduled,
            "other": c.state == _dashboard.OTHER_STATES,
        } for c in _dashboard.every_state(t, counts)]
        models.append({"model": t.name, "graph": t.graph.__name__, "states": states,
                       "throughput": speed.get(t.name, []), "paused": paused.get(t.name),
                       "chart": _chart.chart_svg(t.name, speed.get(t.name, [])),
                       "limits": [u for u in limits if u.model == t.name]})
    workers = _dashboard.live_workers(store, now, LIVE_AFTER)
    return {
        "now": now, "models_info": models,
        "workers": workers, "worker_rows": _worker_rows(workers, d.labels),
        "launcher": _launcher(d.launcher_control),
        "actions": _dashboard.recent_actions(store, 10),
        "unknown_cap": _dashboard.UNKNOWN_CAP,
    }


def _overview_values(view: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, str] = {}
    for m in view["models_info"]:
        for s in m["states"]:
            base = f"{m['model']}:{s['state']}"
            values[f"rows:{base}"] = figure(s["rows"], s["estimated"])
            values[f"due:{base}"] = figure(s["due"], s["estimated"] and s["due"] >= 10_000)
            values[f"oldest:{base}"] = age(s["oldest_due_seconds"])
            values[f"failing:{base}"] = figure(s["failing"], False)
        values.update(_chart.bar_values(m["model"], m["throughput"]))
    values["workers"] = str(len(view["workers"]))
    return {"values": values, "tables": {"workers": view["worker_rows"]},
            "now": view["now"].isoformat()}


def _worker_rows(workers: list[dict[str, Any]], labels: dict[str, str]) -> list[list[str]]:
    """The workers table's cells as texts, for the page and its refresh alike (a worker
    that stops leaves the table at the next refresh, not only at the next page load)."""
    return [[str(w["id"]), str(w["hostname"]), str(w["pid"]),
             w["started_at"].strftime("%Y-%m-%d %H:%M:%S"), w["last_seen"].strftime("%H:%M:%S"),
             str(w["in_flight"]),
             ", ".join(labels.get(m, m) for m in str(w["models"]).split(",") if m)]
            for w in workers]


def _graph_values(d: Dashboard, t: TrackedModel) -> dict[str, str]:
    store, now = d.stator.store, d.stator.clock.now()
    counts = {c.state: c for c in _dashboard.state_counts(store, now)
              if c.model == t.name}
    rates = _dashboard.edge_rates(store, t, now)
    values = {}
    for name in t.graph.states:
        c = counts.get(name)
        values[node_key(name)] = (
            f"{figure(c.rows, c.estimated)} rows" + (f", {c.due} due" if c.due else "")
            if c else "0 rows")
    for source in t.graph.states.values():
        for target in source.children:
            rate = rates.get((source.name, target), 0.0)
            values[edge_key(source.name, target)] = f"{rate:.1f}/min" if rate else ""
    return values


def _launcher(control: Path | None) -> dict[str, Any] | None:
    if control is None or not control.exists():
        return None
    from .._launcher._report import LauncherStateUnreadable, NoLauncherState, status_report

    try:
        return status_report(control)
    except LauncherStateUnreadable as exc:
        return {"unreadable": str(exc)}
    except (NoLauncherState, OSError, ValueError):
        return None
