"""What a careless user or an attacker can put in the dashboard's URLs and forms: paging
cursors, primary keys, times.  Each is answered with a 400 or a 404 and a one-line message,
never a 500, on SQLite and PostgreSQL (which refuses more: integers beyond an ``integer``
column, NUL in text, naive times)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from stator import ManualClock, Stator

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

_json_parts = st.one_of(
    st.integers(), st.text(), st.floats(), st.booleans(), st.none(),
    st.datetimes().map(lambda d: d.isoformat()),
    st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
)
_cursors = st.one_of(st.text(), st.lists(_json_parts, max_size=3).map(json.dumps))


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    model=st.sampled_from(["orders", "codes"]),
    state=st.sampled_from([None, "new", "done", "nope"]),
    after=_cursors,
    pk=st.one_of(st.integers().map(str), st.text()),
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
    from stator._cli import main
    from stator.dashboard import create_app

    stator, _ints, _texts = two_tables
    control = tmp_path / "control"
    control.mkdir()
    (control / "state.json").write_text(broken)
    page = TestClient(create_app(stator, launcher_control=control)).get("/")
    assert page.status_code == 200
    assert "launcher state unreadable: " in page.text
    with pytest.raises(SystemExit) as done:
        main(["launcher-status", "--control", str(control)])
    err = capsys.readouterr().err.strip()
    assert done.value.code == 2
    assert err.startswith("error: launcher state unreadable: ") and "\n" not in err, err
