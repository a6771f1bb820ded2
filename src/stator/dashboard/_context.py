"""What every request of the dashboard shares: the Stator, the token, the sessions, the
templates (autoescaped: row data and error messages are text, never markup), and the checks
an action runs before anything else."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote

from jinja2 import Environment, PackageLoader, select_autoescape
from prometheus_client import CollectorRegistry
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from .._stator import Stator
from .._store import TrackedModel
from . import _auth, _guard
from ._dbmetrics import DatabaseCollector
from ._format import age, figure, part


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
        self.env.filters["age"] = age
        self.env.filters["figure"] = figure
        self.env.filters["part"] = part
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(DatabaseCollector(stator))
        self.by_name = {t.name: t for t in stator.store.tracked}
        # Pages name a model by its label (``shop.Order``, ``Order``), as the CLI does; URLs
        # and keys keep its table's name.
        self.labels = labels = {t.name: t.label for t in stator.store.tracked}
        self.env.filters["label"] = lambda name: labels.get(name, name)

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
