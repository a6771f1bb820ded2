"""Who gets in, on SQLite and PostgreSQL: with a token every route needs it (found from the
app's own route table, so a new page cannot be forgotten), the Host check against DNS
rebinding, the security headers, and sessions that are signed, per-browser, ended by signing
out and slow to guess."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from stator import ManualClock, Stator
from stator._store import _dashboard, _schema
from stator.dashboard import _auth, _guard, create_app

from .flow import Flow
from .test_http import BASE, TOKEN, add, csrf_of, row_of

ORIGIN = {"origin": BASE}
BEARER = {"authorization": f"Bearer {TOKEN}"}
OPEN = {"/login", "/logout"}  # with a token, the only routes that answer strangers
EXAMPLE = {"model": "orders", "pk": "1", "state": "new", "name": "nightly", "action": "pause"}


@pytest.fixture
def setup(
    backend: str, clock: ManualClock, make_stator: Callable[..., Stator],
    build_models: Callable[..., Any],
) -> Iterator[tuple[Stator, Any]]:
    m = build_models(Flow, history=True)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m, [{"id": 1, "note": "fail"}, {"id": 2, "note": "ok"}])
    stator.run_once(raise_errors=False)  # one row with a traceback to leak
    yield stator, m


def browser(stator: Stator, **options: Any) -> TestClient:
    app = create_app(stator, token=TOKEN, allowed_hosts=["testserver"], **options)
    return TestClient(app, base_url=BASE)


def sign_in(c: TestClient, who: str = "ann", token: str = TOKEN) -> Any:
    return c.post("/login", data={"token": token, "who": who}, headers=ORIGIN,
                  follow_redirects=False)


def every_route(c: TestClient) -> list[tuple[str, str]]:
    """(method, example path) for each route of the app, read from its route table."""
    found = []
    for route in c.app.routes:  # type: ignore[attr-defined]
        if isinstance(route, Mount):
            assert route.path == "/static", f"a new mount {route.path}: guard it or list it"
            continue
        assert isinstance(route, Route)
        path = re.sub(r"\{(\w+)(:\w+)?\}", lambda g: EXAMPLE[g.group(1)], route.path)
        found += [(method, path) for method in sorted(route.methods or ()) if method != "HEAD"]
    return found


def test_with_a_token_every_route_is_refused_to_strangers(setup: Any) -> None:
    stator, _m = setup
    c = browser(stator)
    routes = every_route(c)
    assert len(routes) >= 20
    checked = 0
    for method, path in [*routes, ("GET", "/nope"), ("GET", "/api/nope.json")]:
        if path in OPEN:
            continue
        r = c.request(method, path, headers=ORIGIN, follow_redirects=False)
        where = f"{method} {path}"
        if method == "GET" and not path.startswith("/api/") and path != "/metrics":
            assert r.status_code == 303, where
            assert r.headers["location"].startswith("/login?next="), where
        else:
            assert r.status_code == 401, where
            assert r.headers["www-authenticate"] == "Bearer", where
        assert "orders" not in r.text and "Traceback" not in r.text, where
        assert "stator_rows" not in r.text, where
        checked += 1
    assert checked >= 20
    # Nor does the sign-in page say what is behind it.
    login = c.get("/login")
    assert login.status_code == 200
    assert stator.url not in login.text and "orders" not in login.text


def test_the_same_routes_answer_a_bearer_token_and_a_session(setup: Any) -> None:
    stator, _m = setup
    reads = ["/", "/api/overview.json", "/metrics", "/errors", "/models/orders/graph",
             "/api/models/orders/graph.json", "/models/orders/rows", "/models/orders/rows/1"]
    scripted = browser(stator)
    for path in reads:
        assert scripted.get(path, headers=BEARER).status_code == 200, path
    assert "Traceback" in scripted.get("/models/orders/rows/1", headers=BEARER).text
    assert scripted.get("/", headers={"authorization": "Bearer nope"}).status_code == 401
    person = browser(stator)
    assert sign_in(person).status_code == 303
    for path in reads:
        assert person.get(path).status_code == 200, path
    assert stator.url in person.get("/").text


def test_metrics_are_open_only_with_public_metrics(setup: Any) -> None:
    stator, _m = setup
    assert browser(stator).get("/metrics").status_code == 401
    public = browser(stator, public_metrics=True)
    metrics = public.get("/metrics")
    assert metrics.status_code == 200 and "stator_rows" in metrics.text
    assert public.get("/api/overview.json").status_code == 401  # only /metrics
    assert public.get("/", follow_redirects=False).status_code == 303


def test_sign_in_leads_back_to_the_page_asked_for_never_elsewhere(setup: Any) -> None:
    stator, _m = setup
    c = browser(stator)
    first = c.get("/models/orders/rows?state=new", follow_redirects=False)
    assert first.headers["location"] == "/login?next=%2Fmodels%2Forders%2Frows%3Fstate%3Dnew"
    form = c.get(first.headers["location"]).text
    assert 'name="next" value="/models/orders/rows?state=new"' in form
    for target, lands in [("/models/orders/rows?state=new", "/models/orders/rows?state=new"),
                          ("//evil.example/x", "/"), ("/\\evil.example", "/"),
                          ("https://evil.example/", "/"), ("", "/")]:
        r = c.post("/login", data={"token": TOKEN, "next": target}, headers=ORIGIN,
                   follow_redirects=False)
        assert (r.status_code, r.headers["location"]) == (303, lands), target


# -- Host check and headers -------------------------------------------------------------------


@pytest.mark.parametrize("token", [TOKEN, None])
def test_only_known_host_names_are_answered(setup: Any, token: str | None) -> None:
    """A DNS-rebinding page reaches the dashboard under its own name: 400, whatever the
    path, before anything else is looked at."""
    stator, _m = setup
    app = create_app(stator, token=token, allowed_hosts=["dash.example", "[::1]"])
    c = TestClient(app, base_url=BASE)
    for host in ["testserver", "evil.example", "evil.example:8765", "localhost.evil.example",
                 "evil.example@localhost", "localhost/x", "", "dash.example.evil"]:
        for path in ["/", "/login", "/metrics", "/static/dashboard.js"]:
            r = c.get(path, headers={"host": host, **BEARER}, follow_redirects=False)
            assert r.status_code == 400, (host, path)
            assert "orders" not in r.text
    for host in ["localhost", "localhost:8765", "LOCALHOST", "127.0.0.1:8765", "[::1]:8765",
                 "10.1.2.3", "dash.example", "Dash.Example:443"]:
        r = c.get("/api/overview.json", headers={"host": host, **BEARER})
        assert r.status_code == 200, host


def test_every_answer_carries_the_security_headers(
    setup: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    stator, _m = setup
    c = browser(stator)

    def broken(*args: Any) -> None:
        raise RuntimeError(f"lost {stator.url}")

    monkeypatch.setattr(_dashboard, "error_groups", broken)
    failing = TestClient(c.app, base_url=BASE, raise_server_exceptions=False)
    answers = [c.get("/", follow_redirects=False), c.get("/login"),
               c.get("/static/dashboard.js"), c.get("/", headers={"host": "evil.example"}),
               c.get("/metrics"), c.get("/", headers=BEARER), c.get("/models/nope/graph",
                                                                     headers=BEARER),
               failing.get("/errors", headers=BEARER)]
    # Starlette's own 500 page (written outside every user middleware) says nothing.
    assert answers[-1].status_code == 500 and stator.url not in answers[-1].text
    for r in answers:
        h = r.headers
        assert h["x-frame-options"] == "DENY", r.url
        assert h["x-content-type-options"] == "nosniff", r.url
        csp = h["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp, r.url
    assert answers[5].headers["cache-control"] == "no-store"  # rows and tracebacks
    page = answers[5].text
    assert "<script>" not in page and " style=" not in page and "javascript:" not in page


# -- sessions -------------------------------------------------------------------------------


def test_each_sign_in_gets_its_own_session_and_csrf_token(setup: Any) -> None:
    stator, m = setup
    url = "/models/orders/move/1"
    ann, bob = browser(stator), browser(stator)
    sign_in(ann), sign_in(bob, "bob")
    ann_cookie, bob_cookie = ann.cookies["stator_session"], bob.cookies["stator_session"]
    ann_csrf = csrf_of(ann.get(url + "?to=held").text)
    bob_csrf = csrf_of(bob.get(url + "?to=held").text)
    assert ann_cookie != bob_cookie and ann_csrf != bob_csrf
    form = {"seen_state": "new", "seen_next": row_of(stator, m, 1).state_next.isoformat(),
            "to": "held"}
    assert bob.post(url, data={**form, "csrf": ann_csrf}, headers=ORIGIN).status_code == 403
    # Signing in again starts a new session: new cookie, new CSRF token, the old one ended.
    sign_in(ann)
    assert ann.cookies["stator_session"] != ann_cookie
    assert csrf_of(ann.get(url + "?to=held").text) not in (ann_csrf, bob_csrf)
    stale = TestClient(ann.app, base_url=BASE, cookies={"stator_session": ann_cookie})
    assert stale.get("/", follow_redirects=False).status_code == 303
    assert row_of(stator, m, 1).state == "new"


def test_signing_out_ends_the_session_on_the_server(setup: Any) -> None:
    stator, _m = setup
    c = browser(stator)
    sign_in(c)
    cookie = c.cookies["stator_session"]
    page = c.get("/models/orders/pause").text
    csrf = csrf_of(page)
    assert 'action="/logout"' in page
    # Another site cannot sign the operator out: no GET, no POST without the CSRF token
    # or from another origin.
    assert c.get("/logout", follow_redirects=False).status_code == 405
    for headers, data in [({"origin": "http://evil.example"}, {"csrf": csrf}),
                          (ORIGIN, {}), (ORIGIN, {"csrf": "x" * 64})]:
        r = c.post("/logout", data=data, headers=headers, follow_redirects=False)
        assert r.status_code == 403, (headers, data)
    assert c.get("/api/overview.json").status_code == 200
    out = c.post("/logout", data={"csrf": csrf}, headers=ORIGIN, follow_redirects=False)
    assert (out.status_code, out.headers["location"]) == (303, "/login")
    # The browser forgets the cookie; someone who copied it still holds it.
    copied = TestClient(c.app, base_url=BASE, cookies={"stator_session": cookie})
    assert copied.get("/", follow_redirects=False).status_code == 303
    assert copied.get("/api/overview.json").status_code == 401
    assert copied.post("/models/orders/pause", data={"csrf": csrf},
                       headers=ORIGIN).status_code == 401
    with stator.engine.connect() as conn:
        assert conn.execute(select(_schema.actions_table)).first() is None


def test_sessions_expire_and_forged_cookies_open_nothing(setup: Any) -> None:
    stator, _m = setup
    c = browser(stator)
    sign_in(c)
    cookie = c.cookies["stator_session"]
    for forged in ["x", cookie + "x", cookie[:-2], cookie.split(".")[0]]:
        other = TestClient(c.app, base_url=BASE, cookies={"stator_session": forged})
        assert other.get("/api/overview.json").status_code == 401, forged
    assert c.get("/api/overview.json").status_code == 200
    stator.clock.advance(12 * 3600)
    assert c.get("/api/overview.json").status_code == 401


def test_the_action_log_names_the_signed_in_user_not_a_cookie(setup: Any) -> None:
    stator, _m = setup
    c = browser(stator)
    c.cookies.set("stator_who", "alice (CEO)")
    sign_in(c, who="  ann\n  smith ")
    csrf = csrf_of(c.get("/models/orders/pause").text)
    assert c.post("/models/orders/pause", data={"csrf": csrf}, headers=ORIGIN,
                  follow_redirects=False).status_code == 303
    script = browser(stator)
    script.cookies.set("stator_who", "alice (CEO)")
    assert script.post("/models/orders/resume", headers=BEARER,
                       follow_redirects=False).status_code == 303
    with stator.engine.connect() as conn:
        actors = conn.execute(select(_schema.actions_table.c.actor)).scalars().all()
    assert [a.split(" from ")[0] for a in actors] == ["ann smith", "token"]
    assert not any("alice" in a for a in actors)


def test_wrong_tokens_make_the_client_wait(setup: Any) -> None:
    stator, _m = setup
    clock = stator.clock
    c = browser(stator)
    assert sign_in(c, token="wrong").status_code == 403
    # Even the right token is not looked at until a second has passed…
    waiting = sign_in(c)
    assert waiting.status_code == 429 and "try again in 1 s" in waiting.text
    assert c.get("/api/overview.json", headers=BEARER).status_code == 429
    clock.advance(1)
    assert c.get("/api/overview.json", headers={"authorization": "Bearer x"}).status_code == 401
    # …and each wrong token in a row doubles the wait (1, 2, 4 s …), by sign-in or bearer.
    assert "try again in 2 s" in sign_in(c).text
    clock.advance(2)
    assert sign_in(c, token="wrong again").status_code == 403
    clock.advance(3.5)
    r = c.get("/api/overview.json", headers=BEARER)
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    clock.advance(0.5)
    assert sign_in(c).status_code == 303
    assert c.get("/api/overview.json").status_code == 200
    # A right token forgets the wrong ones.
    assert sign_in(c, token="wrong").status_code == 403
    clock.advance(1)
    assert sign_in(c).status_code == 303


def test_wrong_tokens_from_one_ipv6_network_share_their_wait() -> None:
    """An IPv6 host can hold a whole /64: a new address per try must not start afresh."""
    backoff, now = _auth.Backoff(), datetime(2026, 1, 1, tzinfo=UTC)
    backoff.wrong("2001:db8::1", now)
    assert backoff.wait("2001:db8::ffff:2", now) == 1.0
    assert backoff.wait("2001:db8:0:1::1", now) == 0.0  # the next /64 is someone else
    assert backoff.wait("fe80::1%eth0", now) == 0.0
    backoff.wrong("10.0.0.1", now)
    assert backoff.wait("10.0.0.2", now) == 0.0  # IPv4: by address
    assert backoff.wait("::ffff:10.0.0.1", now) == 0.0
    backoff.right("2001:db8::3")
    assert backoff.wait("2001:db8::1", now) == 0.0


def test_an_https_proxy_not_trusted_is_named_in_the_refusal(setup: Any) -> None:
    """Behind a TLS proxy whose X-Forwarded-Proto is ignored every POST looks cross-site:
    the refusal says what to do."""
    stator, _m = setup
    c = browser(stator)
    r = c.post("/login", data={"token": TOKEN}, headers={"origin": "https://testserver"})
    assert r.status_code == 403 and "--trusted-proxy" in r.text
    r = c.post("/login", data={"token": TOKEN}, headers={"origin": "https://evil.example"})
    assert r.status_code == 403 and "--trusted-proxy" not in r.text


def test_a_large_body_is_refused_before_anything_reads_it(setup: Any) -> None:
    """The sign-in form is open to strangers: a body of a gigabyte must not be buffered
    (Starlette's own limits still let ~1 GB of form fields through)."""
    stator, _m = setup
    c = browser(stator)
    form = {"content-type": "application/x-www-form-urlencoded", **ORIGIN}
    big = "token=" + "a" * _guard.MAX_BODY
    r = c.post("/login", content=big, headers=form)
    assert r.status_code == 413 and "64 KiB" in r.text
    assert r.headers["x-frame-options"] == "DENY"
    # Sent in chunks with no Content-Length, it is counted as it arrives.
    chunks = iter([b"token=", *[b"a" * 4096] * 20])
    assert c.post("/login", content=chunks, headers=form).status_code == 413
    # A body under the limit still works, and the refusals cost no wrong-token wait.
    assert sign_in(c).status_code == 303
    csrf = csrf_of(c.get("/models/orders/pause").text)
    assert c.post("/models/orders/pause", data={"csrf": csrf, "x": "y" * 1000}, headers=ORIGIN,
                  follow_redirects=False).status_code == 303


def test_done_messages_come_from_a_fixed_set(setup: Any) -> None:
    stator, _m = setup
    c = browser(stator)
    sign_in(c)
    said = "Call support at +1 555 0100"
    row = c.get("/models/orders/rows/2", params={"done": said})
    rows = c.get("/models/orders/rows", params={"done": said, "state": "new"})
    for page in (row, rows):
        assert page.status_code == 200 and "support" not in page.text
        assert 'class="done"' not in page.text
    assert '<p class="done">moved</p>' in c.get("/models/orders/rows/2?done=moved").text
    shown = c.get("/models/orders/rows?state=new&done=due-all&n=3").text
    assert '<p class="done">3 row(s) made due now.</p>' in shown
    odd = c.get("/models/orders/rows?state=new&done=due-all&n=3%20evil").text
    assert '<p class="done">row(s) made due now.</p>' in odd and "evil" not in odd
