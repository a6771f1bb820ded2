"""Every dashboard page and action through Starlette's test client, on SQLite and
PostgreSQL: what is shown, what is refused, and that row data is always text."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session
from starlette.testclient import TestClient

from stator import ManualClock, Stator
from stator._store import EdgeCount, Heartbeat, _schema
from stator.dashboard import create_app

from .flow import Flow

TOKEN = "t0ken-for-tests"
XSS_ROW = "<script>alert('row')</script>"
XSS_ERROR = "fail <img src=x onerror=alert('err')>"
BASE = "http://testserver"


@pytest.fixture
def setup(
    backend: str, clock: ManualClock, make_stator: Callable[..., Stator],
    build_models: Callable[..., Any],
) -> Iterator[tuple[Stator, Any]]:
    m = build_models(Flow, history=True)
    stator = make_stator(backend, [m.Order], clock)
    yield stator, m


def client(stator: Stator, token: str | None = TOKEN, sign_in: bool = True) -> TestClient:
    c = TestClient(create_app(stator, token=token, allowed_hosts=["testserver"]), base_url=BASE)
    if token is not None and sign_in:
        r = c.post("/login", data={"token": token, "who": "ann"}, headers={"origin": BASE},
                   follow_redirects=False)
        assert r.status_code == 303
    return c


def add(stator: Stator, m: Any, rows: list[dict[str, Any]]) -> None:
    with Session(stator.engine) as s:
        s.execute(insert(m.Order), rows)
        s.commit()


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]*)"', html)
    assert found is not None
    return found.group(1)


def row_of(stator: Stator, m: Any, pk: int) -> Any:
    with Session(stator.engine) as s:
        return s.get(m.Order, pk)


# -- pages ----------------------------------------------------------------------------------


def test_overview_counts_per_state_match_the_database(setup: Any) -> None:
    stator, m = setup
    add(stator, m, [{"id": i, "note": "fail" if i % 5 == 0 else "ok"} for i in range(1, 31)])
    stator.run_once(raise_errors=False)
    c = client(stator, token=None)
    page = c.get("/")
    assert page.status_code == 200
    assert "read-only" in page.text and "orders" in page.text
    values = c.get("/api/overview.json").json()["values"]
    assert values["rows:orders:done"] == "24"
    assert values["rows:orders:new"] == "6"
    assert values["failing:orders:new"] == "6"
    assert values["due:orders:new"] == "0"  # failed once: waiting out its backoff
    assert values["rows:orders:held"] == "0"


def test_the_workers_table_comes_with_each_refresh(setup: Any) -> None:
    """The overview's JSON carries the workers table's cells (as texts, the page fills them
    in as text), so a worker that stops leaves the table without a reload."""
    stator, m = setup
    label = m.Order._meta.label if hasattr(m.Order, "_meta") else "Order"
    now = stator.clock.now()
    stator.store.heartbeat(Heartbeat("w-<b>1</b>", now, now, 4, ("orders",),
                                     {"t-1": "running", "t-2": "idle"}, 4242))
    web = client(stator, token=None)
    (row,) = web.get("/api/overview.json").json()["tables"]["workers"]
    assert row[0] == "w-<b>1</b>" and row[2] == "4242" and row[5:] == ["1", label]
    page = web.get("/").text
    assert '<td class="n">4242</td>' in page and "w-&lt;b&gt;1&lt;/b&gt;" in page
    stator.clock.advance(3600)  # its heartbeat too old: no longer live
    assert web.get("/api/overview.json").json()["tables"]["workers"] == []
    assert "no live worker" in web.get("/").text


def test_graph_page_draws_every_state_and_edge_with_live_figures(setup: Any) -> None:
    stator, m = setup
    add(stator, m, [{"id": i, "note": "ok"} for i in range(1, 4)])
    c = client(stator, token=None)
    page = c.get("/models/orders/graph")
    assert page.status_code == 200
    for state in Flow.states:
        assert f'id="node-{state}"' in page.text
    for edge in ("new:done", "new:held", "new:failed", "held:done"):
        assert f'data-key="edge:{edge}"' in page.text
    assert "stateDiagram" in page.text  # the Mermaid source, for copying
    assert c.get("/api/models/orders/graph.json").json()["values"]["node:new"] == "3 rows, 3 due"


def test_edge_rates_come_from_the_workers_edge_stats(setup: Any) -> None:
    stator, _m = setup
    now = stator.clock.now()
    stator.store.record_stats([], now - timedelta(days=1), [
        EdgeCount(worker_id="w", model="orders", source="new", target="done",
                  period_end=now, count=50),
    ])
    values = client(stator, token=None).get("/api/models/orders/graph.json").json()["values"]
    assert values["edge:new:done"] == "10.0/min"  # 50 over the 5-minute window
    assert values["edge:held:done"] == ""


def test_rows_are_paged_by_keyset_through_every_row(setup: Any) -> None:
    stator, m = setup
    add(stator, m, [{"id": i, "note": "ok"} for i in range(1, 121)])
    c = client(stator, token=None)
    for query in ("state=new", "", "state=new&due=1"):
        seen: list[int] = []
        url = f"/models/orders/rows?{query}"
        while url:
            page = c.get(url)
            assert page.status_code == 200
            seen += [int(x) for x in re.findall(r'/models/orders/rows/(\d+)"', page.text)]
            nxt = re.search(r'class="next" href="([^"]+)"', page.text)
            url = "/models/orders/rows" + nxt.group(1).replace("&amp;", "&") if nxt else ""
        assert sorted(seen) == list(range(1, 121)), query
        assert len(seen) == 120


def test_row_data_and_error_messages_are_rendered_as_text(setup: Any) -> None:
    stator, m = setup
    add(stator, m, [{"id": 1, "note": XSS_ROW}, {"id": 2, "note": XSS_ERROR}])
    stator.run_once(raise_errors=False)
    c = client(stator)
    pages = [c.get("/models/orders/rows"), c.get("/models/orders/rows/1"),
             c.get("/models/orders/rows/2"), c.get("/errors"), c.get("/")]
    for page in pages:
        assert page.status_code == 200
        assert "<script>alert" not in page.text
        assert "<img src=x" not in page.text
    assert "&lt;script&gt;alert(&#39;row&#39;)&lt;/script&gt;" in pages[0].text
    assert "&lt;img src=x onerror=alert(&#39;err&#39;)&gt;" in pages[2].text
    assert "Traceback" in pages[2].text
    assert "ValueError" in pages[3].text  # grouped by exception type


def test_unknown_model_state_row_and_cursor(setup: Any) -> None:
    stator, _m = setup
    c = client(stator)
    assert c.get("/models/nope/graph").status_code == 404
    assert c.get("/models/nope/rows").status_code == 404
    assert c.get("/models/orders/rows?state=nope").status_code == 404
    assert c.get("/models/orders/rows/999").status_code == 404
    assert c.get("/models/orders/rows/abc").status_code == 404
    assert c.get("/models/orders/rows?after=%5B1%2C2%2C3%5D").status_code == 400
    assert c.get("/models/orders/states/done/retry-failing").status_code == 404
    assert c.get("/models/orders/retry/1").status_code == 404


def test_errors_page_groups_by_model_state_and_exception(setup: Any) -> None:
    stator, m = setup
    add(stator, m, [{"id": i, "note": f"fail {i}"} for i in range(1, 4)])
    stator.run_once(raise_errors=False)
    page = client(stator, token=None).get("/errors")
    label = m.Order._meta.label if hasattr(m.Order, "_meta") else "Order"  # not the table
    assert re.search(rf"<td>{re.escape(label)}</td><td><a[^>]*>new</a></td><td>ValueError</td>"
                     r'<td class="n">3</td><td class="n">3</td>', page.text)


# -- actions ----------------------------------------------------------------------------------


def test_posts_are_refused_without_a_token_or_from_another_site(setup: Any) -> None:
    stator, m = setup
    add(stator, m, [{"id": 1, "note": "ok"}])
    seen_next = row_of(stator, m, 1).state_next.isoformat()
    form = {"seen_state": "new", "seen_next": seen_next, "to": "held"}
    url = "/models/orders/move/1"
    origin = {"origin": BASE}

    read_only = client(stator, token=None)
    assert read_only.post(url, data=form, headers=origin).status_code == 403
    assert read_only.get(url + "?to=held").status_code == 403
    assert read_only.post("/login", data={"token": "x"}, headers=origin).status_code == 403

    anonymous = client(stator, sign_in=False)
    assert anonymous.post(url, data=form, headers=origin).status_code == 401
    other = client(stator)
    forged = {**form, "csrf": csrf_of(other.get(url + "?to=held").text)}  # not its session's
    assert anonymous.post(url, data=forged, headers=origin).status_code == 401
    wrong = {"authorization": "Bearer wrong"}
    assert anonymous.post(url, data=form, headers=wrong).status_code == 401

    signed = client(stator)
    csrf = csrf_of(signed.get(url + "?to=held").text)
    assert signed.post(url, data=forged, headers=origin).status_code == 403  # other's CSRF
    assert signed.post(url, data=form, headers=origin).status_code == 403  # no CSRF token
    assert signed.post(url, data={**form, "csrf": "0" * 64}, headers=origin).status_code == 403
    evil = {"origin": "http://evil.example"}
    assert signed.post(url, data={**form, "csrf": csrf}, headers=evil).status_code == 403
    referer = {"referer": "http://evil.example/x"}
    assert signed.post(url, data={**form, "csrf": csrf}, headers=referer).status_code == 403
    assert signed.post(url, data={**form, "csrf": csrf}).status_code == 403  # neither header
    assert row_of(stator, m, 1).state == "new"  # nothing above did anything

    done = signed.post(url, data={**form, "csrf": csrf}, headers={"referer": BASE + url},
                       follow_redirects=False)
    assert done.status_code == 303
    assert row_of(stator, m, 1).state == "held"
    bearer = {"authorization": f"Bearer {TOKEN}"}
    stator.clock.advance(1)  # the wrong bearer token above made this client wait a second
    back = anonymous.post(url, data={"seen_state": "held", "seen_next": "", "to": "done"},
                          headers=bearer, follow_redirects=False)
    assert back.status_code == 303
    assert row_of(stator, m, 1).state == "done"


def test_move_is_checked_against_the_graph_and_fenced(setup: Any) -> None:
    stator, m = setup
    add(stator, m, [{"id": 1, "note": "ok"}])
    c = client(stator)
    url = "/models/orders/move/1"
    csrf = csrf_of(c.get(url + "?to=held").text)
    assert c.get(url + "?to=failed_not").status_code == 404
    seen_next = row_of(stator, m, 1).state_next.isoformat()
    post = {"csrf": csrf, "seen_state": "new", "seen_next": seen_next}
    h = {"origin": BASE}
    assert c.post(url, data={**post, "to": "new"}, headers=h).status_code == 400  # no edge
    stale = {**post, "seen_next": (stator.clock.now() - timedelta(days=1)).isoformat()}
    assert c.post(url, data={**stale, "to": "held"}, headers=h).status_code == 409
    other = {**post, "seen_state": "held"}  # held -> done is an edge, but the row is in new
    assert c.post(url, data={**other, "to": "done"}, headers=h).status_code == 409
    assert row_of(stator, m, 1).state == "new"
    r = c.post(url, data={**post, "to": "held"}, headers=h, follow_redirects=False)
    assert r.status_code == 303
    row = row_of(stator, m, 1)
    assert (row.state, row.state_next, row.state_attempts) == ("held", None, 0)
    assert row.state_history[-1][0] == "held"
    with stator.engine.connect() as conn:
        (action,) = conn.execute(select(_schema.actions_table)).mappings().all()
    assert (action["action"], action["detail"], action["row_pk"]) == ("move", "new -> held", "1")
    assert action["actor"].startswith("ann from ")
    assert "ann from" in c.get("/").text  # the overview lists recent actions


def test_retry_now_and_retry_all_failing(setup: Any) -> None:
    stator, m = setup
    add(stator, m, [{"id": i, "note": "fail"} for i in range(1, 4)])
    stator.run_once(raise_errors=False)
    assert stator.run_once().claimed == 0  # all waiting out a 60 s backoff
    c = client(stator)
    h = {"origin": BASE}
    csrf = csrf_of(c.get("/models/orders/retry/1").text)
    seen_next = row_of(stator, m, 1).state_next.isoformat()
    r = c.post("/models/orders/retry/1", data={"csrf": csrf, "seen_state": "new",
               "seen_next": seen_next}, headers=h, follow_redirects=False)
    assert r.status_code == 303
    assert row_of(stator, m, 1).state_next == stator.clock.now()
    assert stator.run_once(raise_errors=False).claimed == 1
    r = c.post("/models/orders/states/new/retry-failing", data={"csrf": csrf}, headers=h,
               follow_redirects=False)
    assert r.status_code == 303
    assert "done=due-all&n=3" in r.headers["location"]
    report = stator.run_once(raise_errors=False)
    assert report.claimed == 3


def test_pause_stops_claims_until_resumed(setup: Any) -> None:
    stator, m = setup
    add(stator, m, [{"id": 1, "note": "ok"}])
    c = client(stator)
    h = {"origin": BASE}
    csrf = csrf_of(c.get("/models/orders/pause").text)
    assert c.post("/models/orders/pause", data={"csrf": csrf}, headers=h,
                  follow_redirects=False).status_code == 303
    assert "paused by ann" in c.get("/").text
    assert stator.run_once().claimed == 0  # from the next claim on
    # Nothing due while paused, so the worker sleeps until the resume wakes it.
    assert stator.store.next_due(stator.store.tracked) is None
    assert c.post("/models/orders/resume", data={"csrf": csrf}, headers=h,
                  follow_redirects=False).status_code == 303
    assert stator.run_once().claimed == 1
    with stator.engine.connect() as conn:
        actions = conn.execute(select(_schema.actions_table.c.action)).scalars().all()
    assert actions == ["pause", "resume"]


# -- /metrics -------------------------------------------------------------------------------


def test_metrics_match_the_database(setup: Any) -> None:
    stator, m = setup
    add(stator, m, [{"id": i, "note": "fail" if i % 4 == 0 else "ok"} for i in range(1, 41)])
    stator.run_once(raise_errors=False)
    add(stator, m, [{"id": i, "note": "ok"} for i in range(41, 46)])
    stator.clock.advance(5)
    text = client(stator, token=None).get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    rows = {s.labels["state"]: s.value for s in families["stator_rows"].samples}
    with stator.engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(m.Order.__table__)).scalar_one()
    assert sum(rows.values()) == total == 45
    # Every state has its series, the empty ones at zero (so an alert rule finds them).
    assert rows == {"new": 15, "held": 0, "done": 30, "failed": 0}
    due = {s.labels["state"]: s.value for s in families["stator_due_rows"].samples}
    assert due["new"] == 5
    failing = {s.labels["state"]: s.value for s in families["stator_failing_rows"].samples}
    assert failing == {"new": 10, "held": 0, "done": 0, "failed": 0}
    oldest = {s.labels["state"]: s.value for s in families["stator_oldest_due_seconds"].samples}
    assert oldest["new"] >= 5
    assert families["stator_live_workers"].samples[0].value == 0
    paused = families["stator_paused"].samples[0]
    label = m.Order._meta.label if hasattr(m.Order, "_meta") else "Order"
    assert (paused.labels, paused.value) == ({"model": "orders", "model_label": label}, 0)


def test_every_model_series_names_the_table_and_the_label(setup: Any) -> None:
    """``model`` keeps the table's name (existing rules match), ``model_label`` is the name
    the CLI and pages use: both on every series that is per model."""
    stator, m = setup
    label = m.Order._meta.label if hasattr(m.Order, "_meta") else "Order"
    text = client(stator, token=None).get("/metrics").text
    per_model = [s for f in text_string_to_metric_families(text) for s in f.samples
                 if "model" in s.labels]
    assert {s.name for s in per_model} >= {
        "stator_rows", "stator_due_rows", "stator_oldest_due_seconds", "stator_failing_rows",
        "stator_counts_estimated", "stator_paused"}
    assert all((s.labels["model"], s.labels["model_label"]) == ("orders", label)
               for s in per_model)


def test_status_and_dashboard_share_one_count(setup: Any) -> None:
    stator, m = setup
    add(stator, m, [{"id": i, "note": "ok"} for i in range(1, 8)])
    (model,) = stator.status()["models"]
    # Both list every state of the graph, the empty ones with their zero.
    assert [s["state"] for s in model["states"]] == ["new", "held", "done", "failed"]
    assert [s["rows"] for s in model["states"]] == [7, 0, 0, 0]
    values = client(stator, token=None).get("/api/overview.json").json()["values"]
    for s in model["states"]:
        assert values[f"rows:orders:{s['state']}"] == str(s["rows"])
    assert json.dumps(model["states"])  # still JSON-ready


def test_overview_shows_the_launchers_databases_and_slots(setup: Any, tmp_path: Any) -> None:
    from stator._launcher._place import Place

    stator, _m = setup
    control = tmp_path / "control"
    place = Place(control)
    control.mkdir()
    place.write_state({
        "launcher": {"pid": 1, "started_at": None, "slots_used": 2, "max_workers": 4,
                     "waiting": 0, "updated_at": None},
        "databases": [{"database": "sqlite:///tenant-a.db", "state": "running", "slot": True,
                       "pid": 4242, "started_at": None, "starts": 1, "restarts": 0,
                       "last_error": "<b>boom</b>"}],
    })
    page = TestClient(create_app(stator, launcher_control=control,
                                 allowed_hosts=["testserver"])).get("/")
    assert "sqlite:///tenant-a.db" in page.text
    assert "&lt;b&gt;boom&lt;/b&gt;" in page.text and "<b>boom" not in page.text
    assert "not running" in page.text  # nobody holds the control place's lock


def test_the_token_can_come_from_the_environment(
    setup: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """STATOR_DASHBOARD_TOKEN reaches the dashboard as its token."""
    from stator.cli import dashboard, main

    stator, _m = setup
    monkeypatch.setenv("STATOR_DASHBOARD_TOKEN", "from-env")
    seen: list[Any] = []
    monkeypatch.setattr(dashboard, "serve_dashboard",
                        lambda make, host, port, token, control, level, **kw: seen.append(token))
    monkeypatch.setattr(dashboard, "load_app", lambda app, db: stator)
    with pytest.raises(SystemExit) as done:
        main(["dashboard", "x:y", "--host", "0.0.0.0"])
    assert done.value.code == 0 and seen == ["from-env"]


def test_string_keys_with_markup_are_linked_and_shown_as_text(
    backend: str, clock: ManualClock, make_stator: Callable[..., Stator],
    build_models: Callable[..., Any],
) -> None:
    m = build_models(Flow, string_pk=True)
    stator = make_stator(backend, [m.Order], clock)
    key = "<b>k&1/2</b>"
    add(stator, m, [{"id": key, "note": "ok"}])
    c = client(stator)
    link = "/models/orders/rows/%3Cb%3Ek%261%2F2%3C%2Fb%3E"
    assert link in c.get("/models/orders/rows").text
    page = c.get(link)
    assert page.status_code == 200
    assert "&lt;b&gt;k&amp;1/2&lt;/b&gt;" in page.text and "<b>k" not in page.text
    confirm = c.get("/models/orders/move/%3Cb%3Ek%261%2F2%3C%2Fb%3E?to=held")
    assert confirm.status_code == 200
    seen_next = row_of(stator, m, key).state_next.isoformat()
    done = c.post("/models/orders/move/%3Cb%3Ek%261%2F2%3C%2Fb%3E", data={
        "csrf": csrf_of(confirm.text), "seen_state": "new", "seen_next": seen_next,
        "to": "held"}, headers={"origin": BASE}, follow_redirects=False)
    assert done.status_code == 303
    assert done.headers["location"].startswith(link + "?done=")
    assert row_of(stator, m, key).state == "held"


def test_the_overview_draws_transitions_per_minute_and_a_tidy_footer(setup: Any) -> None:
    """The chart: one bar a minute for the last ten, the busiest the full height, from the
    workers' stats (transitions, not rows processed); the footer has no dangling " · "."""
    from stator.dashboard import _chart

    stator, _m = setup
    now = stator.clock.now()
    with stator.engine.begin() as conn:
        conn.execute(insert(_schema.stats_table), [
            {"worker_id": "w", "model": "orders", "period_start": now - timedelta(minutes=k),
             "period_end": now - timedelta(minutes=k) + timedelta(seconds=30),
             "processed": 99, "transitions": moved, "errors": 0, "timeouts": 0, "deleted": 0,
             "lost": 0, "queue_depth": 0, "lag_seconds": 0.0}
            for k, moved in ((1, 40), (3, 10))
        ])
    page = client(stator, token=None).get("/").text
    [svg] = re.findall(r'<svg class="chart".*?</svg>', page, flags=re.S)
    heights = [int(h) for h in re.findall(r'<rect class="bar"[^>]* height="(\d+)"', svg)]
    assert len(heights) == 10 and max(heights) == _chart.HEIGHT - _chart.TOP - _chart.BOTTOM
    assert sorted(h for h in heights if h) == [9, 36]  # 10 and 40 transitions, to scale
    assert ">peak 40/min<" in svg and "40 transitions this minute" in svg
    assert "10 transitions 2 min ago" in svg
    assert "<script" not in svg
    values = client(stator, token=None).get("/api/overview.json").json()["values"]
    assert sorted(int(values[f"bar:orders:{i}"]) for i in range(10))[-2:] == [9, 36]
    assert values["peak:orders"] == "peak 40/min"
    [footer] = re.findall(r"<footer>.*?</footer>", page, flags=re.S)
    assert "·" not in footer and '<span id="updated"></span>' in footer


def test_pages_name_the_model_by_its_label_as_the_cli_does(setup: Any) -> None:
    """``Order`` (SQLAlchemy's class) or ``app.Order`` (Django's label), not the table;
    URLs and keys keep the table's name."""
    stator, m = setup
    label = m.Order._meta.label if hasattr(m.Order, "_meta") else "Order"
    web = client(stator, token=None)
    page = web.get("/").text
    assert f"<h2>{label} <small>" in page and f'<a href="/models/orders/graph">{label}</a>' in page
    assert f"<h1>{label} <small>" in web.get("/models/orders/graph").text
    assert f"<h1>{label} rows</h1>" in web.get("/models/orders/rows").text
    add(stator, m, [{"id": 1, "note": "fail"}])
    stator.run_once(raise_errors=False)
    errors = web.get("/errors").text
    assert f"<tr><td>{label}</td>" in errors and "</summary>" in errors
    assert re.search(rf"\d\d:\d\d:\d\d {re.escape(label)} <a href=\"/models/orders/rows/1\"",
                     errors)
    (model,) = stator.status()["models"]
    assert (model["model"], model["table"]) == (label, "orders")
