"""What a careless user or an attacker can put in the dashboard's URLs and forms: paging
cursors, primary keys, times.  Each is answered with a 400 or a 404 and a one-line message,
never a 500, on SQLite and PostgreSQL (which refuses more: integers beyond an ``integer``
column, NUL in text, naive times)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from starlette.testclient import TestClient

from stator import ManualClock, Stator
from stator._store import _dashboard

from .flow import Flow
from .test_http import BASE, add, client, csrf_of, row_of


@pytest.fixture
def two_tables(
    backend: str, clock: ManualClock, make_stator: Callable[..., Stator],
    build_models: Callable[..., Any],
) -> tuple[Stator, Any, Any]:
    """``orders`` keyed by an integer, ``codes`` by text; three rows each."""
    ints = build_models(Flow, history=True)
    texts = build_models(Flow, table="codes", string_pk=True)
    stator = make_stator(backend, [ints.Order, texts.Order], clock)
    add(stator, ints, [{"id": i, "note": "ok"} for i in range(1, 4)])
    add(stator, texts, [{"id": f"k{i}", "note": "ok"} for i in range(1, 4)])
    return stator, ints, texts


def rows_url(model: str, after: str, state: str | None = None) -> str:
    query = {"state": state} if state else {}
    return f"/models/{model}/rows?{urlencode({**query, 'after': after})}"


BAD_CURSORS = [
    ("orders", None, '["abc"]'),  # text for an integer key: PostgreSQL refused it
    ("orders", None, "[" + "9" * 30 + "]"),  # beyond SQLite's 64-bit integer
    ("orders", None, "[true]"),
    ("orders", None, "[1.5]"),
    ("orders", "new", '["2026-01-01T00:00:00+00:00", "x"]'),
    ("orders", "new", '[5, 1]'),
    ("codes", None, "[1]"),  # a number for a text key
    ("codes", None, '["\\ud800"]'),  # a lone surrogate: no database can hold it
    ("orders", None, "[" * 5000),  # nested past Python's recursion limit
]


@pytest.mark.parametrize(("model", "state", "after"), BAD_CURSORS)
def test_a_cursor_the_dashboard_did_not_make_is_a_400(
    two_tables: Any, model: str, state: str | None, after: str,
) -> None:
    stator, _ints, _texts = two_tables
    page = client(stator, token=None).get(rows_url(model, after, state))
    assert page.status_code == 400, page.text
    assert "not a cursor this dashboard made" in page.text


@pytest.mark.parametrize(("model", "after"), [
    ("codes", '["k\\u0000"]'),  # NUL in text
    ("orders", "[2147483648]"),  # beyond an integer column (64-bit on SQLite)
    # SQLite's cursors keep the time as the text stored (in UTC, without an offset)
    ("orders", '["2026-01-01T00:00:00", 1]'),  # a naive time
    ("orders", '["0001-01-01T00:00:00+01:00", 1]'),  # before the calendar in UTC
])
def test_a_cursor_beyond_what_postgresql_holds_is_a_400_there(
    two_tables: Any, backend: str, model: str, after: str,
) -> None:
    stator, _ints, _texts = two_tables
    state = "new" if after.startswith('["') and model == "orders" else None
    page = client(stator, token=None).get(rows_url(model, after, state))
    assert page.status_code == (200 if backend.startswith("sqlite") else 400)


@pytest.mark.parametrize("pk", ["2147483648", "-2147483649", "9" * 30, "abc", "1.0", ""])
def test_a_key_no_row_can_have_is_a_404(two_tables: Any, pk: str) -> None:
    stator, _ints, _texts = two_tables
    c = client(stator)
    for url in (f"/models/orders/rows/{pk}", f"/models/orders/retry/{pk}",
                f"/models/orders/move/{pk}?to=held"):
        page = c.get(url)
        assert page.status_code == 404, (url, page.text)
        assert "Traceback" not in page.text


def test_nul_in_a_text_key_is_a_404(two_tables: Any) -> None:
    stator, _ints, _texts = two_tables
    assert client(stator).get("/models/codes/rows/k%00").status_code == 404


def test_a_garbled_or_naive_seen_next_is_a_400_and_changes_nothing(two_tables: Any) -> None:
    stator, ints, _texts = two_tables
    c = client(stator)
    csrf = csrf_of(c.get("/models/orders/move/1?to=held").text)
    before = row_of(stator, ints, 1).state_next
    for seen_next in ("garbage", "2026-01-01T00:00:00", before.replace(tzinfo=None).isoformat(),
                      "0001-01-01T00:00:00+01:00"):
        for action, extra in (("move", {"to": "held"}), ("retry", {})):
            done = c.post(f"/models/orders/{action}/1", headers={"origin": BASE}, data={
                "csrf": csrf, "seen_state": "new", "seen_next": seen_next, **extra})
            assert done.status_code == 400, (seen_next, done.text)
            assert "seen_next is not a time this dashboard showed" in done.text
    row = row_of(stator, ints, 1)
    assert (row.state, row.state_next) == ("new", before)


# -- any input at all ------------------------------------------------------------------------

_ints = st.one_of(st.integers(), st.integers(min_value=-(2**70), max_value=2**70))
_json_parts = st.one_of(
    _ints, st.text(), st.floats(), st.booleans(), st.none(),
    st.datetimes().map(lambda d: d.isoformat()),
    st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
)
_cursors = st.one_of(st.text(), st.lists(_json_parts, max_size=3).map(json.dumps))


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    model=st.sampled_from(["orders", "codes"]),
    state=st.one_of(st.sampled_from([None, "new", "done", "nope"]), st.text()),
    after=_cursors,
    pk=st.one_of(_ints.map(str), st.text()),
)
def test_any_cursor_or_key_is_answered_without_a_server_error(
    two_tables: Any, model: str, state: str | None, after: str, pk: str,
) -> None:
    stator, _ints, _texts = two_tables
    c = client(stator, token=None)  # a server error raises here
    assert c.get(rows_url(model, after, state)).status_code in (200, 400, 404)
    assert c.get(f"/models/{model}/rows/{quote(pk, safe='')}").status_code in (200, 404)


# -- the launcher's state file (--control) ---------------------------------------------------

BROKEN_STATES = [
    "{not json",
    '{"launcher": ' + "[" * 5000,  # nested past Python's recursion limit
    "[]",
    "{}",
    '{"launcher": 5}',
    '{"launcher": {}, "databases": "x"}',
    '{"launcher": {}, "databases": [7]}',
    '{"launcher": {"started_at": "yesterday"}}',
    '{"launcher": {"slots_used": "two"}}',
    '{"launcher": {}, "databases": [{"database": "a", "pid": 5, '
    '"started_at": "2026-01-01T00:00:00"}]}',  # a naive time: no uptime can be worked out
]


@pytest.mark.parametrize("broken", BROKEN_STATES)
def test_an_unreadable_launcher_state_is_said_in_one_line(
    two_tables: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str], broken: str,
) -> None:
    from stator.cli import main
    from stator.dashboard import create_app

    stator, _ints, _texts = two_tables
    control = tmp_path / "control"
    control.mkdir()
    (control / "state.json").write_text(broken)
    page = TestClient(create_app(stator, launcher_control=control,
                                 allowed_hosts=["testserver"])).get("/")
    assert page.status_code == 200
    assert "launcher state unreadable: " in page.text
    with pytest.raises(SystemExit) as done:
        main(["launcher-status", "--control", str(control)])
    err = capsys.readouterr().err.strip()
    assert done.value.code == 2
    assert err.startswith("error: launcher state unreadable: ") and "\n" not in err, err


# -- states the graph lacks (written by raw SQL, a migration, another tool) ------------------


def set_states(stator: Stator, table: str, sql_where_state: dict[str, str]) -> None:
    with stator.engine.begin() as conn:
        for where, state in sql_where_state.items():
            conn.execute(text(f"UPDATE {table} SET state = :s WHERE {where}"), {"s": state})


def listed(page: str, model: str = "orders") -> list[int]:
    return sorted(int(x) for x in re.findall(rf'href="/models/{model}/rows/(\d+)"', page))


def test_rows_in_a_state_the_graph_lacks_are_listed_from_the_overview(two_tables: Any) -> None:
    stator, _ints, _texts = two_tables
    set_states(stator, "orders", {"id IN (1, 2)": "ghost"})
    c = client(stator, token=None)
    link = re.search(r'href="(/models/orders/rows\?state=ghost)"', c.get("/").text)
    assert link is not None
    page = c.get(link.group(1))
    assert page.status_code == 200
    assert listed(page.text) == [1, 2]
    assert "<option selected>ghost</option>" in page.text
    assert listed(c.get("/models/orders/rows?unknown=1").text) == [1, 2]
    assert c.get("/models/orders/rows?state=ghost&failing=1").status_code == 200  # none yet
    nope = c.get("/models/orders/rows?state=nope")
    assert nope.status_code == 404 and "orders has no rows in &#39;nope&#39;" in nope.text


def test_100000_states_the_graph_lacks_are_capped_into_one_other_series(
    two_tables: Any,
) -> None:
    stator, _ints, _texts = two_tables
    with stator.engine.begin() as conn:  # rows 10 and up: one state each
        conn.execute(text(
            "INSERT INTO orders (id, state) WITH RECURSIVE n(i) AS "
            "(SELECT 10 UNION ALL SELECT i + 1 FROM n WHERE i < 100009) "
            "SELECT i, 'junk-' || i FROM n"))
    set_states(stator, "orders", {"id IN (1, 2)": "ghost", "id = 3": _dashboard.OTHER_STATES})
    c = client(stator, token=None)

    families = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}
    rows = {s.labels["state"]: s.value for s in families["stator_rows"].samples
            if s.labels["model"] == "orders"}
    assert len(rows) <= len(Flow.states) + _dashboard.UNKNOWN_CAP + 1
    assert sum(rows.values()) == 100_003  # every row, in one series or another
    assert rows["ghost"] == 2  # the most rows of the unknown states: a series of its own
    assert rows[_dashboard.OTHER_STATES] == 100_003 - 2 - (_dashboard.UNKNOWN_CAP - 1)

    overview = c.get("/")
    assert overview.status_code == 200
    assert len(overview.text) < 100_000
    assert 'href="/models/orders/rows?unknown=1"' in overview.text
    shown = re.findall(r'data-key="rows:orders:', overview.text)
    assert len(shown) == len(Flow.states) + _dashboard.UNKNOWN_CAP + 1
    assert len(listed(c.get("/models/orders/rows?unknown=1").text)) == _dashboard.PAGE_SIZE


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)  # estimates are PG's
def test_estimated_counts_include_rare_and_unknown_states_and_sum_to_the_row_count(
    two_tables: Any,
) -> None:
    stator, ints, _texts = two_tables
    add(stator, ints, [{"id": i, "note": "ok"} for i in range(10, 310)])
    set_states(stator, "orders", {"id < 100": "done", "id BETWEEN 100 AND 119": "ghost",
                                  "id = 200": "rare-1", "id = 201": "rare-2", "id = 202": "held"})
    with stator.engine.begin() as conn:
        conn.execute(text("ANALYZE orders"))
        total = conn.execute(text("SELECT count(*) FROM orders")).scalar_one()
    counts = [c for c in _dashboard.state_counts(stator.store, stator.clock.now(), exact_below=0)
              if c.model == "orders"]
    assert all(c.estimated for c in counts)
    # ANALYZE reads a table this small whole: its statistics are exact, rare values aside.
    assert sum(c.rows for c in counts) == total == 303
    by_state = {c.state: c.rows for c in counts}
    assert by_state["ghost"] == 20


# -- table names that are URL syntax ---------------------------------------------------------

# Quoted wherever SQL names them, as in tests/test_quoting.py.
@pytest.mark.parametrize("table", ["a/b?c#d e", "x%2Fy"])
def test_a_model_whose_table_name_is_url_syntax_has_working_pages(
    backend: str, clock: ManualClock, make_stator: Callable[..., Stator],
    build_models: Callable[..., Any], table: str,
) -> None:
    if "%" in table and not backend.startswith("sqlite"):
        pytest.skip("migrate cannot yet create a PostgreSQL table whose name holds %")
    m = build_models(Flow, table=table)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m, [{"id": i, "note": "ok"} for i in range(1, 4)])
    c = client(stator)
    part = quote(table, safe="")
    overview = c.get("/").text
    for tail in ("graph", "rows", "pause", "rows?state=new"):
        assert f'href="/models/{part}/{tail}"' in overview
    graph = c.get(f"/models/{part}/graph")
    assert graph.status_code == 200 and f'data-poll="/api/models/{part}/graph.json"' in graph.text
    assert c.get(f"/api/models/{part}/graph.json").json()["values"]["node:new"] == "3 rows, 3 due"
    rows = c.get(f"/models/{part}/rows?state=new")
    assert rows.status_code == 200 and listed(rows.text, re.escape(part)) == [1, 2, 3]
    row = c.get(f"/models/{part}/rows/1")
    assert row.status_code == 200 and f'href="/models/{part}/move/1?to=held"' in row.text
    confirm = c.get(f"/models/{part}/move/1?to=held")
    assert confirm.status_code == 200
    moved = c.post(f"/models/{part}/move/1", headers={"origin": BASE}, data={
        "csrf": csrf_of(confirm.text), "seen_state": "new",
        "seen_next": row_of(stator, m, 1).state_next.isoformat(), "to": "held"},
        follow_redirects=False)
    assert moved.status_code == 303
    assert moved.headers["location"].startswith(f"/models/{part}/rows/1?")
    assert row_of(stator, m, 1).state == "held"
    assert c.get(f"/models/{part}/pause").status_code == 200
    assert c.get("/models/a/graph").status_code == 404  # the name is one segment, never two


# A value Python cannot read in a row (raw SQL, a migration, another tool wrote it): garbage
# text in a SQLite time or JSON column, PostgreSQL's infinity or a year past 9999.  The engine
# sets such a row aside (tests/test_unreadable_rows.py); the pages must still show it, with
# the value as the database holds it, and let it be moved (which fixes its state_changed).
UNREADABLE = {
    "sqlite": [("state_changed", "'garbage'", "garbage"), ("state_next", "'garbage'", "garbage"),
               ("state_history", "'garbage'", "garbage")],
    "postgresql": [("state_changed", "'infinity'", "infinity"),
                   ("state_next", "'infinity'", "infinity"),
                   ("state_changed", "'20000-01-01'", "20000-01-01")],
}


@pytest.mark.parametrize("case", [0, 1, 2])
def test_a_row_holding_a_value_that_cannot_be_read_is_shown_and_can_be_moved(
    two_tables: Any, backend: str, case: int,
) -> None:
    stator, ints, _texts = two_tables
    column, value, shown = UNREADABLE["sqlite" if backend.startswith("sqlite") else
                                      "postgresql"][case]
    with stator.engine.begin() as conn:
        conn.execute(text(f"UPDATE orders SET {column} = {value} WHERE id = 2"))
    c = client(stator)
    for url in ["/models/orders/rows", "/models/orders/rows?state=new"]:
        page = c.get(url)
        assert page.status_code == 200, (url, page.text)
        assert "/models/orders/rows/2" in page.text and "/models/orders/rows/1" in page.text
    page = c.get("/models/orders/rows/2")
    assert page.status_code == 200 and shown in page.text
    confirm = c.get("/models/orders/move/2?to=held")
    assert confirm.status_code == 200
    seen_next = re.search(r'name="seen_next" value="([^"]*)"', confirm.text)
    assert seen_next is not None
    r = c.post("/models/orders/move/2", headers={"origin": BASE}, follow_redirects=False,
               data={"csrf": csrf_of(confirm.text), "seen_state": "new", "to": "held",
                     "seen_next": seen_next.group(1)})
    if column != "state_changed":  # a due time it cannot read, a history it cannot extend
        assert r.status_code == 400, r.text  # one line: fix the value first
        assert state_of(stator, 2) == "new"
        return
    assert r.status_code == 303, r.text
    assert row_of(stator, ints, 2).state == "held"


def state_of(stator: Stator, pk: int) -> str:
    with stator.engine.connect() as conn:
        return str(conn.execute(text("SELECT state FROM orders WHERE id = :pk"),
                                {"pk": pk}).scalar())


def test_a_move_in_a_table_whose_name_ends_in_v_keeps_its_history(
    backend: str, clock: ManualClock, make_stator: Callable[..., Stator],
    build_models: Callable[..., Any],
) -> None:
    """``nav.state_history`` holds the text ``v.state``: the history's SQL gets its values as
    arguments, not by replacing text in it (which made this move a 500)."""
    m = build_models(Flow, table="nav", history=True)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m, [{"id": 1, "note": "ok"}])
    c = client(stator)
    confirm = c.get("/models/nav/move/1?to=held")
    seen_next = re.search(r'name="seen_next" value="([^"]*)"', confirm.text)
    assert seen_next is not None
    r = c.post("/models/nav/move/1", headers={"origin": BASE}, follow_redirects=False,
               data={"csrf": csrf_of(confirm.text), "seen_state": "new", "to": "held",
                     "seen_next": seen_next.group(1)})
    assert r.status_code == 303, r.text
    assert [s for s, _ in row_of(stator, m, 1).state_history] == ["held"]
