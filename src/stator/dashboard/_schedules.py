"""The dashboard's schedules page: each schedule's timing, state, last and next tick, last
result, ticks fired and missed and lag; with a token, "run now", "pause" and "resume" as
POSTs refused like every other action without a session's CSRF token and the dashboard's
own origin (``Dashboard.refuse_unless_allowed``).  The reads and writes are
``_schedule_ops``'s."""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from .._schedule_ops import ACTIONS, schedule_action, schedule_report
from ..errors import ConfigError
from ._context import Dashboard

_PATHS = {"run-now": "run_now", "pause": "pause", "resume": "resume"}


def schedule_routes(d: Dashboard) -> list[Route]:
    def schedules_page(request: Request) -> Response:
        rows = schedule_report(d.stator.engine, d.stator.clock.now())
        done = request.query_params.get("done")
        return d.page(request, "schedules.html", schedules=rows, actions=list(_PATHS),
                      done=done if done in ACTIONS else None,
                      schedule=request.query_params.get("name"),
                      applied=request.query_params.get("applied") == "1")

    async def act(request: Request) -> Response:
        await d.refuse_unless_allowed(request)
        action = _PATHS.get(request.path_params["action"])
        if action is None:
            raise HTTPException(404, "no such action")
        name = request.path_params["name"]
        try:
            applied = await run_in_threadpool(schedule_action, d.stator.engine, name, action,
                                              d.stator.clock.now(), d.actor(request))
        except ConfigError as exc:
            raise HTTPException(404, str(exc)) from None
        query = urlencode({"done": action, "name": name, "applied": int(bool(applied))})
        return RedirectResponse(f"/schedules?{query}", status_code=303)

    return [
        Route("/schedules", schedules_page, methods=["GET"]),
        Route("/schedules/{name:path}/{action}", act, methods=["POST"]),
    ]
