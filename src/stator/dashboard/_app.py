"""The dashboard's web layer: routes, templates, and the checks before every action.

Server-rendered pages (Jinja2, autoescaping on: row data and error messages are text, never
markup); a small script refreshes the figures in place from the JSON twins of the overview
and graph pages.  All database work goes through ``_store._dashboard`` (reads) and
``_store._operator_actions`` (actions).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from .._graph import role
from .._graph_svg import edge_key, node_key, to_svg
from .._graph_text import to_mermaid
from .._stator import LIVE_AFTER, Stator
from .._store import TrackedModel, _dashboard, _operator_actions
from ..errors import TransitionConflict, TransitionError
from . import _auth, _guard
from ._dbmetrics import DatabaseCollector

STATIC = Path(__file__).parent / "static"
# What ``?done=`` may say after an action: a short code picks one of these fixed texts, so
# a link can never make the page say something of its own.
DONE = {
    "due": "made due now",
    "moved": "moved",
    "due-all": "row(s) made due now",
}


class Dashboard:
    """The state shared by every request: the Stator, the token, the sessions, the
    templates."""

    def __init__(
        self, stator: Stator, token: str | None = None, launcher_control: Path | None = None,
    ) -> None:
        self.stator = stator
        self.token = token or None
        self.launcher_control = launcher_control
        self.sessions = _auth.Sessions()
        self.backoff = _auth.Backoff()
        self.env = Environment(
            loader=PackageLoader("stator.dashboard", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        self.env.filters["age"] = _age
        self.env.filters["figure"] = _figure
        self.env.filters["part"] = _part
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(DatabaseCollector(stator))
        self.by_name = {t.name: t for t in stator.store.tracked}

    # -- helpers ---------------------------------------------------------------------------

    def tracked(self, segment: str) -> TrackedModel:
        """The model a path segment names (kept encoded by ``ModelInOneSegment``)."""
        model = unquote(segment)
        found = self.by_name.get(model)
        if found is None:
            raise HTTPException(404, f"no model {model!r} here")
        return found

    def page(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        """A rendered page; before signing in (with a token) it shows no model names and no
        database URL."""
        template = self.env.get_template(name)
        access = _guard.access(request)
        html = template.render(
            request=request, models=list(self.by_name), read_only=self.token is None,
            signed_in=access.signed_in, shown=self.token is None or access.signed_in,
            csrf=access.session.csrf if access.session else "",
            database=self.stator.url, **context,
        )
        return HTMLResponse(html, status_code=status)

    async def refuse_unless_allowed(self, request: Request) -> dict[str, str]:
        """The POSTed form, if this request may act; else a 403."""
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        access = _guard.access(request)
        refusal = _auth.check_post(
            self.token, session=access.session, csrf=form.get("csrf"), bearer=access.bearer,
            origin=request.headers.get("origin"), referer=request.headers.get("referer"),
            scheme=request.url.scheme, host=request.headers.get("host", ""),
        )
        if refusal is not None:
            raise HTTPException(refusal.status, refusal.reason)
        return form

    def actor(self, request: Request) -> str:
        """Who acts, for the action log: the name signed into the session (never a cookie
        the browser could edit), or "token" for a bearer-token script."""
        session = _guard.access(request).session
        who = session.who if session else "token"
        host = request.client.host if request.client else "?"
        return f"{who[:100]} from {host}"


def create_app(
    stator: Stator, token: str | None = None, launcher_control: Path | None = None, *,
    allowed_hosts: Iterable[str] = (), public_metrics: bool = False,
) -> Starlette:
    """The dashboard as an ASGI app over ``stator``.  With ``token``, every page needs it
    (``/metrics`` too unless ``public_metrics``) and actions are enabled; requests must name
    ``localhost``, an IP address or one of ``allowed_hosts`` in their Host header."""
    d = Dashboard(stator, token, launcher_control)

    # -- read-only pages -------------------------------------------------------------------

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
            done=_done(request),
        )

    def row_page(request: Request) -> Response:
        t, row = _row(d, request)
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
            retryable=bool(current and current.scheduled), done=_done(request),
        )

    def errors_page(request: Request) -> Response:
        groups = _dashboard.error_groups(d.stator.store, list(d.by_name))
        return d.page(request, "errors.html", groups=groups,
                      recent=d.stator.store.recent_errors(limit=50, models=list(d.by_name)))

    def metrics(request: Request) -> Response:
        return Response(generate_latest(d.registry), media_type=CONTENT_TYPE_LATEST)

    # -- signing in --------------------------------------------------------------------------

    def login_form(request: Request) -> Response:
        return d.page(request, "login.html", error=None,
                      next=_guard.local_path(request.query_params.get("next")))

    async def login(request: Request) -> Response:
        """Checks the token (wrong ones back off), then starts a new session: a new id and a
        new CSRF token at every sign-in, whatever cookie the browser had before."""
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        if d.token is None:
            raise HTTPException(403, "this dashboard is read-only (start it with --token)")
        origin, host = request.headers.get("origin"), request.headers.get("host", "")
        if not _auth.same_origin(origin, request.headers.get("referer"), request.url.scheme,
                                 host):
            raise HTTPException(403, _auth.cross_site(origin, request.url.scheme, host))
        after = _guard.local_path(form.get("next"))
        client, now = request.client.host if request.client else "?", d.stator.clock.now()
        wait = d.backoff.wait(client, now)
        if wait > 0:
            return d.page(request, "login.html", status=429, next=after,
                          error=_guard.try_again(wait))
        if not _auth.same(form.get("token"), d.token):
            d.backoff.wrong(client, now)
            return d.page(request, "login.html", status=403, error="wrong token", next=after)
        d.backoff.right(client)
        old = _guard.access(request).session
        if old is not None:
            d.sessions.end(old)
        who = " ".join((form.get("who") or "").split())[:100] or "operator"
        _session, cookie = d.sessions.start(who, now)
        response = RedirectResponse(after, status_code=303)
        response.set_cookie(
            _auth.SESSION_COOKIE, cookie, max_age=int(d.sessions.lifetime.total_seconds()),
            httponly=True, samesite="strict", secure=request.url.scheme == "https")
        return response

    async def logout(request: Request) -> Response:
        """Ends the session here, not only in the browser: its cookie opens nothing after.
        A POST from the dashboard's own page with the session's CSRF token, so another site
        cannot sign the operator out (a GET link could, by a top-level navigation)."""
        session = _guard.access(request).session
        if session is not None:
            await d.refuse_unless_allowed(request)
            d.sessions.end(session)
        response = RedirectResponse("/login" if d.token else "/", status_code=303)
        response.delete_cookie(_auth.SESSION_COOKIE)
        return response

    # -- actions: GET shows what would happen and asks; POST does it ----------------------

    def _needs_token() -> None:
        if d.token is None:
            raise HTTPException(403, "this dashboard is read-only (start it with --token)")

    def confirm_row(request: Request) -> Response:
        _needs_token()
        t, row = _row(d, request)
        action = _action(request)
        to = request.query_params.get("to")
        current = t.graph.states.get(row["state"])
        if action == "move" and (to is None or current is None or to not in current.children):
            raise HTTPException(404, f"no transition from {row['state']} to {to}")
        if action not in ("move", "retry"):
            raise HTTPException(404, "no such action")
        return d.page(request, "confirm.html", model=t.name, pk=row[t.pk], row=row,
                      action=action, to=to,
                      seen_next=_seen_next(row["state_next"]))

    async def act_row(request: Request) -> Response:
        form = await d.refuse_unless_allowed(request)
        t, row = await run_in_threadpool(_row, d, request)
        action = _action(request)
        seen_state = form.get("seen_state", "")
        try:
            seen_next = _dashboard.parse_time(form["seen_next"]) if form.get("seen_next") else None
        except ValueError:
            raise HTTPException(400, "seen_next is not a time this dashboard showed") from None
        now, actor = d.stator.clock.now(), d.actor(request)
        try:
            if action == "retry":
                await run_in_threadpool(_operator_actions.retry_now, d.stator.store, t, row[t.pk],
                                        seen_state, seen_next, now, actor)
                done = "due"
            elif action == "move":
                to = form.get("to", "")
                await run_in_threadpool(_operator_actions.move_row, d.stator.store, t, row[t.pk],
                                        seen_state, seen_next, to, now, actor)
                done = "moved"
            else:
                raise HTTPException(404, "no such action")
        except TransitionConflict as exc:
            raise HTTPException(409, str(exc)) from None
        except TransitionError as exc:
            raise HTTPException(400, str(exc)) from None
        where = f"/models/{_part(t.name)}/rows/{_part(row[t.pk])}"
        return RedirectResponse(f"{where}?{urlencode({'done': done})}", status_code=303)

    def confirm_state(request: Request) -> Response:
        _needs_token()
        t = d.tracked(request.path_params["model"])
        state = request.path_params["state"]
        if state not in {s.name for s in t.graph.scheduled_states()}:
            raise HTTPException(404, f"{t.graph.__name__} runs no handler in {state!r}")
        return d.page(request, "confirm.html", model=t.name, action="retry_failing",
                      state=state, pk=None, row=None, to=None, seen_next="")

    async def act_state(request: Request) -> Response:
        await d.refuse_unless_allowed(request)
        t = d.tracked(request.path_params["model"])
        state = request.path_params["state"]
        if state not in {s.name for s in t.graph.scheduled_states()}:
            raise HTTPException(404, f"{t.graph.__name__} runs no handler in {state!r}")
        n = await run_in_threadpool(_operator_actions.retry_failing, d.stator.store, t, state,
                                    d.stator.clock.now(), d.actor(request))
        query = urlencode({"state": state, "done": "due-all", "n": n})
        return RedirectResponse(f"/models/{_part(t.name)}/rows?{query}", status_code=303)

    def confirm_pause(request: Request) -> Response:
        _needs_token()
        t = d.tracked(request.path_params["model"])
        return d.page(request, "confirm.html", model=t.name, action=_verb(request),
                      pk=None, row=None, to=None, seen_next="")

    async def act_pause(request: Request) -> Response:
        await d.refuse_unless_allowed(request)
        t = d.tracked(request.path_params["model"])
        verb = _verb(request)
        await run_in_threadpool(_operator_actions.set_paused, d.stator.store, t.name,
                                verb == "pause", d.stator.clock.now(), d.actor(request))
        return RedirectResponse("/", status_code=303)

    async def not_found(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return d.page(request, "error.html", status=exc.status_code, status_code=exc.status_code,
                      detail=exc.detail)

    routes = [
        Route("/", overview),
        Route("/api/overview.json", overview_json),
        Route("/metrics", metrics),
        Route("/errors", errors_page),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/models/{model}/graph", graph_page),
        Route("/api/models/{model}/graph.json", graph_json),
        Route("/models/{model}/rows", rows_page),
        Route("/models/{model}/rows/{pk:path}", row_page),
        *(Route(f"/models/{{model}}/{action}/{{pk:path}}", confirm_row, methods=["GET"])
          for action in ("retry", "move")),
        *(Route(f"/models/{{model}}/{action}/{{pk:path}}", act_row, methods=["POST"])
          for action in ("retry", "move")),
        Route("/models/{model}/states/{state}/retry-failing", confirm_state, methods=["GET"]),
        Route("/models/{model}/states/{state}/retry-failing", act_state, methods=["POST"]),
        *(Route(f"/models/{{model}}/{verb}", confirm_pause, methods=["GET"])
          for verb in ("pause", "resume")),
        *(Route(f"/models/{{model}}/{verb}", act_pause, methods=["POST"])
          for verb in ("pause", "resume")),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    guard = Middleware(
        _guard.Guard, token=d.token, sessions=d.sessions, backoff=d.backoff,
        now=d.stator.clock.now, allowed_hosts=allowed_hosts, public_metrics=public_metrics)
    app = _Outermost(routes=routes, exception_handlers={HTTPException: not_found},
                     middleware=[guard])
    app.add_middleware(ModelInOneSegment)
    app.state.dashboard = d
    return app


class _Outermost(Starlette):
    """Starlette with ``SecurityHeaders`` around everything, even the 500 page its
    outermost error handler writes (user middleware sits inside that handler)."""

    def build_middleware_stack(self) -> ASGIApp:
        return _guard.SecurityHeaders(super().build_middleware_stack())


def _part(value: object) -> str:
    """``value`` as one URL path segment: ``/``, ``?``, ``#`` and ``%`` encoded too."""
    return quote(str(value), safe="")


class ModelInOneSegment:
    """Routes get a model's path segment still percent-encoded (``Dashboard.tracked`` decodes
    it): a table's name may hold ``/``, which the decoded path would split in two."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw:
            parts = raw.decode("latin-1").split("/", 4)
            at = 3 if parts[1:3] == ["api", "models"] else 2 if parts[1:2] == ["models"] else 0
            if at and len(parts) > at:
                head, rest = parts[:at], "/".join(parts[at + 1:])
                path = "/".join([*head, _part(unquote(parts[at]))])
                scope = {**scope, "path": path + ("/" + unquote(rest) if at + 1 < len(parts)
                                                  else "")}
        await self.app(scope, receive, send)


def _done(request: Request) -> str | None:
    """The fixed text ``?done=CODE`` stands for (with its row count for ``due-all``)."""
    text = DONE.get(request.query_params.get("done", ""))
    if text is None:
        return None
    n = request.query_params.get("n", "")
    return f"{int(n)} {text}" if n.isdecimal() and len(n) < 10 else text


def _seen_next(value: object) -> str:
    """A row's ``state_next`` as the confirm form carries it back: a time, empty for none,
    and the database's text for one that cannot be read (the action is then refused)."""
    if value is None:
        return ""
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _action(request: Request) -> str:
    """``retry`` or ``move``: /models/MODEL/ACTION/PK."""
    return request.url.path.split("/")[3]


def _verb(request: Request) -> str:
    return request.url.path.rstrip("/").rsplit("/", 1)[-1]


def _row(d: Dashboard, request: Request) -> tuple[TrackedModel, dict[str, Any]]:
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
    models = []
    for t in store.tracked:
        mine = {c["state"]: c for c in counts if c["model"] == t.name}
        states = []
        for name in [*t.graph.states, *(c["state"] for c in counts if c["model"] == t.name
                                         and c["state"] not in t.graph.states)]:
            c = mine.get(name)
            oldest = c["oldest_due"] if c else None
            states.append({
                "state": name, "role": role(t.graph.states.get(name)),
                "rows": c["rows"] if c else 0, "due": c["due"] if c else 0,
                "oldest_due_seconds": (now - oldest).total_seconds() if oldest else None,
                "failing": c["failing"] if c else 0,
                "estimated": bool(c and c["estimated"]),
                "scheduled": name in {s.name for s in t.graph.scheduled_states()},
                "other": name == _dashboard.OTHER_STATES,
            })
        models.append({"model": t.name, "graph": t.graph.__name__, "states": states,
                       "throughput": speed.get(t.name, []), "paused": paused.get(t.name)})
    return {
        "now": now, "models_info": models,
        "workers": _dashboard.live_workers(store, now, LIVE_AFTER),
        "launcher": _launcher(d.launcher_control),
        "actions": _dashboard.recent_actions(store, 10),
        "unknown_cap": _dashboard.UNKNOWN_CAP,
    }


def _overview_values(view: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, str] = {}
    for m in view["models_info"]:
        for s in m["states"]:
            base = f"{m['model']}:{s['state']}"
            values[f"rows:{base}"] = _figure(s["rows"], s["estimated"])
            values[f"due:{base}"] = _figure(s["due"], s["estimated"] and s["due"] >= 10_000)
            values[f"oldest:{base}"] = _age(s["oldest_due_seconds"])
            values[f"failing:{base}"] = _figure(s["failing"], False)
        values[f"throughput:{m['model']}"] = " ".join(str(n) for n in m["throughput"])
    values["workers"] = str(len(view["workers"]))
    return {"values": values, "now": view["now"].isoformat()}


def _graph_values(d: Dashboard, t: TrackedModel) -> dict[str, str]:
    store, now = d.stator.store, d.stator.clock.now()
    counts = {c["state"]: c for c in _dashboard.state_counts(store, now)
              if c["model"] == t.name}
    rates = _dashboard.edge_rates(store, t, now)
    values = {}
    for name in t.graph.states:
        c = counts.get(name)
        values[node_key(name)] = (
            f"{_figure(c['rows'], c['estimated'])} rows" + (f", {c['due']} due" if c["due"]
                                                            else "")
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


def _age(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def _figure(n: int, estimated: bool = False) -> str:
    return f"≈{n:,}" if estimated else f"{n:,}"
