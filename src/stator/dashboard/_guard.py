"""The gate in front of every route: the Host check, who is asking, and the security headers.

It wraps the whole app (not each route), so a page added later is guarded without anyone
remembering to: with a token, only the sign-in page, sign-out, the static files and (with
``--public-metrics``) ``/metrics`` answer a request that is neither signed in nor carrying
``Authorization: Bearer TOKEN``.

The Host check is what stops DNS rebinding: a page on ``evil.example`` that re-points its
name at 127.0.0.1 reaches the dashboard with ``Host: evil.example``.  Only ``localhost``,
the address the dashboard was bound to, the names given with ``--allowed-host``, and IP
addresses (a rebinding page always has a name) are answered; anything else gets 400.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import _auth

ACCESS = "stator.access"  # the scope key the gate leaves its finding under
OPEN_PATHS = ("/login", "/logout")
OPEN_PREFIXES = ("/static/",)
# The dashboard's forms hold a token, a name, a CSRF value and a state or two: a body past
# this is refused unread, so no stranger can make the sign-in form buffer a gigabyte.
MAX_BODY = 64 * 1024
# The pages load one stylesheet and one script from /static, poll their JSON twin, and post
# forms to themselves: nothing inline, nothing from elsewhere, never inside a frame.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^:\[\]@/\\\s]+)(:[0-9]{1,5})?$")


@dataclass(frozen=True)
class Access:
    """What the gate found: a signed-in session, the right bearer token, or neither (only
    possible on an open path, or when the dashboard has no token)."""

    session: _auth.Session | None = None
    bearer: bool = False

    @property
    def signed_in(self) -> bool:
        return self.session is not None or self.bearer


def access(request: Request) -> Access:
    found = request.scope.get(ACCESS)
    return found if isinstance(found, Access) else Access()


def host_name(header: str) -> str | None:
    """The name in a Host header (lowercase, IPv6 without brackets), None if malformed."""
    match = _HOST.match(header.strip())
    if match is None:
        return None
    return match.group(1).strip("[]").lower()


def host_allowed(header: str | None, allowed: frozenset[str]) -> bool:
    name = host_name(header or "")
    if name is None:
        return False
    if name in allowed:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class SecurityHeaders:
    """ASGI middleware adding ``HEADERS`` (and no-store on pages) to every answer.  It wraps
    the whole app, Starlette's own 500 page included (``Guard`` sits inside that)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS,
                                      *_no_store(scope["path"])]
            await send(message)

        await self.app(scope, receive, send_with_headers)


class Guard:
    """ASGI middleware: Host check, then authentication, then the app."""

    def __init__(
        self, app: ASGIApp, *, token: str | None, sessions: _auth.Sessions,
        backoff: _auth.Backoff, now: Callable[[], datetime], allowed_hosts: Iterable[str],
        public_metrics: bool,
    ) -> None:
        self.app = app
        self.token = token
        self.sessions = sessions
        self.backoff = backoff
        self.now = now
        self.allowed = frozenset(h.strip("[]").lower() for h in ("localhost", *allowed_hosts))
        self.public_metrics = public_metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refusal = self.refusal(request)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        body = await _small_body(request, receive)
        if body is None:
            await _too_large()(scope, receive, send)
            return
        await self.app(scope, body, send)

    def refusal(self, request: Request) -> Response | None:
        """The answer for a request that may not reach the app (None: it may, and the
        scope then holds its ``Access``)."""
        if not host_allowed(request.headers.get("host"), self.allowed):
            return PlainTextResponse(
                "400: this dashboard does not answer to that Host name (start it with "
                "--allowed-host NAME to add one)", status_code=400)
        if self.token is None:
            return None
        found = self.identify(request)
        if isinstance(found, Response):
            return found
        request.scope[ACCESS] = found
        if found.signed_in or self.open(request.url.path):
            return None
        return _sign_in_first(request)

    def identify(self, request: Request) -> Access | Response:
        """Who is asking: a bearer token (wrong ones back off) or a session cookie."""
        assert self.token is not None
        header = request.headers.get("authorization", "")
        if header[:7].lower() == "bearer ":
            client = request.client.host if request.client else "?"
            now = self.now()
            wait = self.backoff.wait(client, now)
            if wait > 0:
                return too_many_tries(wait)
            if not _auth.same(header[7:], self.token):
                self.backoff.wrong(client, now)
                return PlainTextResponse("401: wrong token", status_code=401,
                                         headers={"WWW-Authenticate": "Bearer"})
            self.backoff.right(client)
            return Access(bearer=True)
        cookie = request.cookies.get(_auth.SESSION_COOKIE)
        return Access(session=self.sessions.find(cookie, self.now()))

    def open(self, path: str) -> bool:
        return (path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)
                or (self.public_metrics and path == "/metrics"))


async def _small_body(request: Request, receive: Receive) -> Receive | None:
    """The request's body read here, whole, as a ``receive`` for the app; None if it is
    longer than ``MAX_BODY`` (said by Content-Length, or found while reading a chunked one)."""
    declared = request.headers.get("content-length", "0")
    if not declared.isdecimal() or int(declared) > MAX_BODY:
        return None
    chunks: list[bytes] = []
    size, more = 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return receive  # the client left: let the app see it as it would
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        more = message.get("more_body", False)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

    return replay


def _too_large() -> Response:
    return PlainTextResponse(f"413: a request body may hold at most {MAX_BODY // 1024} KiB "
                             "here", status_code=413)


def too_many_tries(wait: float) -> Response:
    return PlainTextResponse(f"429: {try_again(wait)}", status_code=429,
                             headers={"Retry-After": str(_whole_seconds(wait))})


def try_again(wait: float) -> str:
    return f"too many wrong tokens; try again in {_whole_seconds(wait)} s"


def _whole_seconds(wait: float) -> int:
    return max(int(wait + 0.999), 1)


def _sign_in_first(request: Request) -> Response:
    """A browser asking for a page is sent to the sign-in page (and back afterwards); a
    script, the JSON API and /metrics get 401."""
    path = request.url.path
    if request.method in ("GET", "HEAD") and not path.startswith("/api/") \
            and path != "/metrics":
        here = path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(here, safe='')}", status_code=303)
    return PlainTextResponse("401: sign in, or send Authorization: Bearer TOKEN",
                             status_code=401, headers={"WWW-Authenticate": "Bearer"})


def _no_store(path: str) -> list[tuple[bytes, bytes]]:
    """Pages hold rows and tracebacks: no browser or proxy cache keeps them."""
    return [] if path.startswith(OPEN_PREFIXES) else [(b"cache-control", b"no-store")]


def local_path(target: str | None) -> str:
    """``target`` if it is a path on this dashboard (where to go after signing in), else
    ``/``: never another site (``//evil.example``, ``/\\evil.example``, ``https:…``)."""
    if (not target or not target.startswith("/") or target.startswith(("//", "/\\"))
            or any(c in target for c in "\\\r\n\t")):
        return "/"
    return target
