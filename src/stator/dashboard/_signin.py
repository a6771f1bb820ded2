"""Signing in to the dashboard and out of it.

A token signs in (wrong ones back off, per client); each sign-in starts a new server-side
session with a new CSRF token, and signing out ends it on the server, not only in the
browser.  Both are POSTs from the dashboard's own pages."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from . import _auth, _guard
from ._context import Dashboard


def signin_routes(d: Dashboard) -> list[Route]:
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

    return [
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
    ]
