"""The dashboard as one ASGI app: the routes of its parts, and what stands around them.

Server-rendered pages (Jinja2) and their JSON twins (``_pages``), signing in (``_signin``)
and the operator's actions (``_actions``), behind the gate every request passes first
(``_guard``), with the security headers on every answer, the 500 page included.  All
database work goes through ``_store._dashboard`` (reads) and ``_store._operator_actions``
(actions).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from .._stator import Stator
from . import _guard
from ._actions import action_routes
from ._context import Dashboard
from ._format import part
from ._pages import page_routes
from ._schedules import schedule_routes
from ._signin import signin_routes

STATIC = Path(__file__).parent / "static"


def create_app(
    stator: Stator, token: str | None = None, launcher_control: Path | None = None, *,
    allowed_hosts: Iterable[str] = (), public_metrics: bool = False,
) -> Starlette:
    """The dashboard as an ASGI app over ``stator``.  With ``token``, every page needs it
    (``/metrics`` too unless ``public_metrics``) and actions are enabled; requests must name
    ``localhost``, an IP address or one of ``allowed_hosts`` in their Host header."""
    d = Dashboard(stator, token, launcher_control)

    async def not_found(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return d.page(request, "error.html", status=exc.status_code, status_code=exc.status_code,
                      detail=exc.detail)

    routes = [
        *page_routes(d),
        *signin_routes(d),
        *action_routes(d),
        *schedule_routes(d),
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
                path = "/".join([*head, part(unquote(parts[at]))])
                scope = {**scope, "path": path + ("/" + unquote(rest) if at + 1 < len(parts)
                                                  else "")}
        await self.app(scope, receive, send)
