"""The dashboard's actions on rows: make a row due now, move it along an edge, retry a
state's failing rows, pause or resume a model.

Each is a GET that shows what would happen and asks, and a POST that does it: only with a
token, a session's CSRF token and the dashboard's own origin
(``Dashboard.refuse_unless_allowed``), and for one row, fenced on the state and due time
the operator saw.  The writes are ``_store._operator_actions``'s."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from .._store import _dashboard, _operator_actions
from ..errors import TransitionConflict, TransitionError
from ._context import Dashboard
from ._format import part
from ._pages import find_row


def action_routes(d: Dashboard) -> list[Route]:
    def _needs_token() -> None:
        if d.token is None:
            raise HTTPException(403, "this dashboard is read-only (start it with --token)")

    def confirm_row(request: Request) -> Response:
        _needs_token()
        t, row = find_row(d, request)
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
        t, row = await run_in_threadpool(find_row, d, request)
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
        where = f"/models/{part(t.name)}/rows/{part(row[t.pk])}"
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
        return RedirectResponse(f"/models/{part(t.name)}/rows?{query}", status_code=303)

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

    return [
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
    ]


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
