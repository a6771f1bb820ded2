"""Who may act, and the checks every state-changing request passes.

Without a token the dashboard is read-only: every POST is refused.  With one, the operator
signs in once (the token on the sign-in page); the browser then holds a session cookie
derived from the token (HttpOnly, SameSite=Strict; the token itself is never stored), and
each form carries a CSRF token derived from the session.  A POST must also come from this
dashboard's own pages: its Origin (or, failing that, Referer) must be the dashboard's own.
Scripts may send ``Authorization: Bearer TOKEN`` instead of the cookie and form token.

Pure functions over header values and the token; the web layer feeds them.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from urllib.parse import urlsplit

SESSION_COOKIE = "stator_session"
WHO_COOKIE = "stator_who"


def session_value(token: str) -> str:
    return hmac.new(token.encode(), b"stator-dashboard-session", hashlib.sha256).hexdigest()


def csrf_value(token: str) -> str:
    return hmac.new(token.encode(), b"stator-dashboard-csrf", hashlib.sha256).hexdigest()


def same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


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


def check_post(
    token: str | None, *, cookie: str | None, csrf: str | None, bearer: str | None,
    origin: str | None, referer: str | None, scheme: str, host: str,
) -> Refusal | None:
    """None if this POST may change state, else why not."""
    if token is None:
        return Refusal(403, "this dashboard is read-only (start it with --token to act)")
    if bearer is not None:
        if not same(bearer, token):
            return Refusal(403, "wrong token")
        if origin is not None and not same_origin(origin, None, scheme, host):
            return Refusal(403, "cross-site request refused")
        return None
    if not same_origin(origin, referer, scheme, host):
        return Refusal(403, "cross-site request refused (Origin/Referer is not this dashboard)")
    if not same(cookie, session_value(token)):
        return Refusal(403, "sign in with the dashboard's token first")
    if not same(csrf, csrf_value(token)):
        return Refusal(403, "missing or wrong CSRF token; reload the page")
    return None
