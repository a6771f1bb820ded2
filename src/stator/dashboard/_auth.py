"""Who may look, who may act, and the checks every request passes.

Without a token the dashboard is open to whoever reaches it (the command line only allows
that on loopback) and read-only: every POST is refused.  With one, every page, the JSON API
and ``/metrics`` (unless ``--public-metrics``) need either a session or
``Authorization: Bearer TOKEN``.  An operator signs in with the token and gets a session:
a random id kept in this process's memory (so signing out, or restarting the dashboard,
ends it for good), sent as a cookie signed with a per-process key (itsdangerous; HttpOnly,
SameSite=Strict) and expiring after ``SESSION_LIFETIME``.  The session holds the name given
at sign-in (the actor in the action log) and its own CSRF token, new at each sign-in.
A POST must also come from this dashboard's own pages: its Origin (or, failing that,
Referer) must be the dashboard's own.  Wrong tokens make their client wait before the next
try (``Backoff``).

Pure checks over header values, plus the two small in-memory tables; the web layer
(``_guard`` and ``_app``) feeds them, with the Stator's clock so tests never sleep.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from itsdangerous import BadData, URLSafeTimedSerializer

from .. import _backoff

SESSION_COOKIE = "stator_session"
SESSION_LIFETIME = timedelta(hours=12)
MAX_SESSIONS = 1_000  # the oldest is dropped beyond this: memory stays bounded
WRONG_TOKEN_FIRST_WAIT = 1.0  # seconds after the first wrong token, doubling per wrong token
WRONG_TOKEN_MAX_WAIT = 60.0
MAX_CLIENTS = 10_000  # clients whose wrong tokens are remembered


def same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


@dataclass(frozen=True)
class Session:
    id: str
    who: str
    csrf: str
    expires: datetime


class Sessions:
    """The signed-in browsers: ``start`` at sign-in, ``find`` on every request, ``end`` at
    sign-out.  A cookie is only a signed session id; what it grants lives here."""

    def __init__(self, lifetime: timedelta = SESSION_LIFETIME,
                 limit: int = MAX_SESSIONS) -> None:
        self.lifetime = lifetime
        self._limit = limit
        self._signer = URLSafeTimedSerializer(secrets.token_bytes(32),
                                              salt="stator-dashboard-session")
        self._live: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, who: str, now: datetime) -> tuple[Session, str]:
        """A new session and its cookie value."""
        session = Session(secrets.token_urlsafe(32), who, secrets.token_hex(32),
                          now + self.lifetime)
        with self._lock:
            self._live[session.id] = session
            while len(self._live) > self._limit:
                self._live.popitem(last=False)
        return session, self._signer.dumps(session.id)

    def find(self, cookie: str | None, now: datetime) -> Session | None:
        """The live session this cookie names, if its signature holds and it has not expired
        or been ended."""
        if not cookie:
            return None
        try:
            sid = self._signer.loads(cookie, max_age=int(self.lifetime.total_seconds()))
        except BadData:
            return None
        with self._lock:
            session = self._live.get(sid) if isinstance(sid, str) else None
            if session is not None and now >= session.expires:
                del self._live[session.id]
                return None
        return session

    def end(self, session: Session) -> None:
        with self._lock:
            self._live.pop(session.id, None)


def client_key(address: str) -> str:
    """Whose wrong tokens these are: the address, but for IPv6 its /64 (one host or home
    usually holds a whole /64, and a new address per try would otherwise never wait)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return address


class Backoff:
    """Wrong tokens per client (``client_key``): after the n-th in a row, that client's next
    try is refused unanswered for ``_backoff.delay(n, ...)`` seconds (1 s, 2 s, 4 s … 60 s);
    a right token forgets its wrong ones."""

    def __init__(self, first: float = WRONG_TOKEN_FIRST_WAIT, cap: float = WRONG_TOKEN_MAX_WAIT,
                 limit: int = MAX_CLIENTS) -> None:
        self._first, self._cap, self._limit = first, cap, limit
        self._wrong: OrderedDict[str, tuple[int, datetime]] = OrderedDict()
        self._lock = threading.Lock()

    def wait(self, client: str, now: datetime) -> float:
        """Seconds this client must still wait before its token is looked at (0: none)."""
        with self._lock:
            found = self._wrong.get(client_key(client))
        if found is None:
            return 0.0
        count, last = found
        until = last + timedelta(seconds=_backoff.delay(count, self._first, self._cap))
        return max((until - now).total_seconds(), 0.0)

    def wrong(self, client: str, now: datetime) -> None:
        key = client_key(client)
        with self._lock:
            count = self._wrong.pop(key, (0, now))[0]
            self._wrong[key] = (count + 1, now)
            while len(self._wrong) > self._limit:
                self._wrong.popitem(last=False)

    def right(self, client: str) -> None:
        with self._lock:
            self._wrong.pop(client_key(client), None)


@dataclass(frozen=True)
class Refusal:
    status: int
    reason: str


def same_origin(origin: str | None, referer: str | None, scheme: str, host: str) -> bool:
    """Whether the request came from a page of this dashboard (``host`` is the Host
    header the browser sent, so a proxy in front keeps working)."""
    own = f"{scheme}://{host}".lower()
    if origin is not None and origin != "null":
        return origin.lower() == own
    if referer:
        parts = urlsplit(referer)
        return f"{parts.scheme}://{parts.netloc}".lower() == own
    return False


def cross_site(origin: str | None, scheme: str, host: str) -> str:
    """Why a POST from elsewhere is refused; when only the scheme differs, the likely cause:
    an HTTPS proxy in front whose X-Forwarded-Proto is not believed."""
    if origin is not None and scheme == "http" and origin.lower() == f"https://{host}".lower():
        return ("cross-site request refused: the browser is on https but the dashboard sees "
                "http (behind a proxy? start the dashboard with --trusted-proxy ADDRESS)")
    return "cross-site request refused (Origin/Referer is not this dashboard)"


def check_post(
    token: str | None, *, session: Session | None, csrf: str | None, bearer: bool,
    origin: str | None, referer: str | None, scheme: str, host: str,
) -> Refusal | None:
    """None if this POST may change state, else why not.  ``bearer``: the request carried
    the right token in its Authorization header (checked by ``_guard``)."""
    if token is None:
        return Refusal(403, "this dashboard is read-only (start it with --token to act)")
    if bearer:
        if origin is not None and not same_origin(origin, None, scheme, host):
            return Refusal(403, cross_site(origin, scheme, host))
        return None
    if not same_origin(origin, referer, scheme, host):
        return Refusal(403, cross_site(origin, scheme, host))
    if session is None:
        return Refusal(403, "sign in with the dashboard's token first")
    if not same(csrf, session.csrf):
        return Refusal(403, "missing or wrong CSRF token; reload the page")
    return None
