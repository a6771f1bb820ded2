"""The counting shared by the dashboard, /metrics and ``stator status``: exact on small
tables, from the planner's statistics and the claim index on big PostgreSQL ones; and the
pure parts of the dashboard (graph layout, request checks)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert, text
from sqlalchemy.orm import Session

from stator import ManualClock, Stator
from stator._graph_layout import layout
from stator._graph_svg import to_svg
from stator._store import _counts, _dashboard, _operator_actions
from stator.dashboard import _auth

from .flow import Flow


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)  # estimates are PG's
def test_big_postgresql_tables_are_counted_from_statistics_and_the_claim_index(
    backend: str, clock: ManualClock, make_stator: Callable[..., Stator],
    build_models: Callable[..., Any],
) -> None:
    m = build_models(Flow)
    stator = make_stator(backend, [m.Order], clock)
    with Session(stator.engine) as s:
        s.execute(insert(m.Order), [{"id": i, "note": "fail" if i <= 4 else "ok"}
                                    for i in range(1, 301)])
        s.commit()
    stator.run_once(raise_errors=False)  # 100 rows: 96 done, 4 failing
    with stator.engine.connect() as conn:
        conn.execute(text(f"ANALYZE {m.Order.__table__.name}"))
        conn.commit()
    now = stator.clock.now()
    exact = {c.state: c for c in _dashboard.state_counts(stator.store, now)}
    assert not any(c.estimated for c in exact.values())
    guessed = {c.state: c for c in
               _dashboard.state_counts(stator.store, now, exact_below=0)}
    assert all(c.estimated for c in guessed.values())
    # ANALYZE reads a table this small whole: the statistics are exact here.
    assert {s: c.rows for s, c in guessed.items() if c.rows} == {
        s: c.rows for s, c in exact.items()}
    assert guessed["new"].due == exact["new"].due == 200
    assert guessed["new"].oldest_due == exact["new"].oldest_due
    assert guessed["new"].failing == exact["new"].failing == 4  # failed this hour
    stator.clock.advance(3600 * 2)
    later = {c.state: c for c in
             _dashboard.state_counts(stator.store, stator.clock.now(), exact_below=0)}
    assert later["new"].failing == 0  # the error log's window has passed
    assert later["new"].due == 204


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_the_due_count_stops_at_its_cap(
    backend: str, clock: ManualClock, make_stator: Callable[..., Stator],
    build_models: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    m = build_models(Flow)
    stator = make_stator(backend, [m.Order], clock)
    with Session(stator.engine) as s:
        s.execute(insert(m.Order), [{"id": i} for i in range(1, 31)])
        s.execute(text(f"ANALYZE {m.Order.__table__.name}"))  # the size estimate
        s.commit()
    monkeypatch.setattr(_counts, "DUE_CAP", 10)
    (new,) = [c for c in _dashboard.state_counts(stator.store, clock.now(), exact_below=0)
              if c.state == "new"]
    assert new.due == 10 and new.rows >= 10


def test_layout_puts_each_state_in_a_column_after_its_parents() -> None:
    placed = {name: node.box for name, node in layout(Flow).nodes.items()}
    assert placed["new"].x < placed["held"].x == placed["failed"].x < placed["done"].x
    assert placed["held"].y != placed["failed"].y
    svg = to_svg(Flow, {"new": "initial"})
    assert svg.count('class="node') == 4 and svg.count('class="edge') == 4
    assert 'class="edge exhausted"' in svg  # new fails to failed


def test_same_origin_accepts_only_this_dashboard() -> None:
    here = ("http", "dash.local:8765")
    assert _auth.same_origin("http://dash.local:8765", None, *here)
    assert not _auth.same_origin("http://evil.example", None, *here)
    assert not _auth.same_origin("https://dash.local:8765", None, *here)
    assert _auth.same_origin(None, "http://dash.local:8765/models/x", *here)
    assert not _auth.same_origin(None, "http://dash.local:8765.evil.example/", *here)
    assert not _auth.same_origin("null", None, *here)
    assert not _auth.same_origin(None, None, *here)


def test_a_session_cookie_is_a_signed_random_id_that_reveals_nothing() -> None:
    now = datetime.now(UTC)
    sessions = _auth.Sessions()
    session, cookie = sessions.start("ann", now)
    other, other_cookie = sessions.start("ann", now)
    assert "ann" not in cookie and session.id != other.id and session.csrf != other.csrf
    assert sessions.find(cookie, now) == session
    assert sessions.find(other_cookie, now) == other
    assert _auth.Sessions().find(cookie, now) is None  # another process's key
    assert sessions.find(session.id, now) is None  # the id alone, unsigned
    assert _auth.check_post(
        "secret", session=session, csrf=session.csrf, bearer=False, origin="http://h",
        referer=None, scheme="http", host="h") is None
    assert _auth.check_post(
        "secret", session=session, csrf=other.csrf, bearer=False, origin="http://h",
        referer=None, scheme="http", host="h") is not None
    refused = _auth.check_post(
        None, session=None, csrf=None, bearer=True, origin=None, referer=None,
        scheme="http", host="h")
    assert refused is not None and refused.status == 403


def test_retry_failing_leaves_rows_without_a_failure_alone(
    backend: str, clock: ManualClock, make_stator: Callable[..., Stator],
    build_models: Callable[..., Any],
) -> None:
    m = build_models(Flow)
    stator = make_stator(backend, [m.Order], clock)
    with Session(stator.engine) as s:
        s.execute(insert(m.Order), [{"id": 1, "note": "fail"}, {"id": 2, "note": "ok"}])
        s.commit()
    stator.run_once(raise_errors=False)
    (tracked,) = stator.store.tracked
    assert _operator_actions.retry_failing(stator.store, tracked, "new", clock.now(), "t") == 1
    clock.advance(timedelta(seconds=1).total_seconds())
    assert stator.run_once(raise_errors=False).claimed == 1


def test_the_core_install_imports_none_of_the_dashboard_extra() -> None:
    import subprocess
    import sys

    code = ("import sys, stator, stator.cli, stator._worker, stator._metrics; "
            "print(sorted(m for m in ('starlette', 'jinja2', 'uvicorn', 'prometheus_client') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_templates_and_static_files_ship_in_the_package() -> None:
    import tomllib
    from fnmatch import fnmatch
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["stator"]
    package = root / "src" / "stator"
    for folder in ("dashboard/templates", "dashboard/static"):
        for path in (package / folder).iterdir():
            relative = str(path.relative_to(package))
            assert any(fnmatch(relative, p) for p in patterns), relative
