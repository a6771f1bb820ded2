"""Periodic schedules that insert or move rows, on every integration and database: each
tick fires once, in the transaction that moves the schedule's next tick on, and a worker
whose lease ran out cannot fire; the schedules follow the code."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from app_side import alias_of, load, run_sql
from sqlalchemy import select, text

from stator import ManualClock, State, StateGraph, Stator
from stator._execute import Executor
from stator._schedules import ScheduleStates
from stator._store._schema import schedules_table
from stator.django._schedule_model import StatorSchedule
from stator.errors import ConfigError

START = datetime(2026, 3, 27, 12, 0, 30, tzinfo=UTC)


class ReportStates(StateGraph):
    new = State(externally_progressed=True, force_initial=True)
    stuck = State(externally_progressed=True)
    retried = State()
    new.transitions_to(stuck)
    stuck.transitions_to(new)
    new.transitions_to(retried)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


def build(
    integration: str, build_models: Callable[..., SimpleNamespace],
    make_stator: Callable[..., Stator], backend: str, clock: ManualClock,
    schedules: dict[str, dict[str, Any]],
) -> SimpleNamespace:
    """The ``reports`` model and a migrated Stator running it with ``schedules`` (whose
    ``insert``/``move`` are filled in with the model)."""
    shop = build_models(ReportStates, table="reports")
    stator = make_stator(backend, [shop.Order], clock)  # makes the table, migrates
    made = SimpleNamespace(reports=shop.Order, clock=clock, backend=backend, base=stator)
    made.stator = restator(made, schedules)
    return made


def restator(shop: SimpleNamespace, schedules: dict[str, dict[str, Any]]) -> Stator:
    """Another Stator over the same tables, declaring ``schedules`` (another deploy)."""
    model = shop.reports
    if alias := alias_of(shop.base):
        from stator._schedule import parse
        from stator.django._setup import build_stator

        label = model._meta.label_lower
        checked = [parse(n, _target(raw, label)) for n, raw in schedules.items()]
        return build_stator(models=[model, StatorSchedule], clock=shop.clock, alias=alias,
                            schedules=checked)
    named = {n: _target(raw, model) for n, raw in schedules.items()}
    return Stator(shop.base.engine, [model], clock=shop.clock, schedules=named)


def _target(raw: dict[str, Any], model: Any) -> dict[str, Any]:
    return {**raw, **{k: model for k in ("insert", "move") if k in raw}}


def rows(stator: Stator, model: type) -> list[Any]:
    if alias := alias_of(stator):
        return list(model.objects.using(alias).order_by("pk"))
    from sqlalchemy.orm import Session

    with Session(stator.engine) as session:
        return list(session.query(model).order_by(text("id")))


def schedule_row(stator: Stator, name: str) -> Any:
    with stator.engine.connect() as conn:
        return conn.execute(
            select(schedules_table).where(schedules_table.c.name == name)).one_or_none()


def drain(shop: SimpleNamespace) -> None:
    while shop.stator.run_once().claimed:
        pass


@pytest.fixture
def hourly(integration, build_models, make_stator, backend, clock) -> SimpleNamespace:
    return build(integration, build_models, make_stator, backend, clock, {
        "hourly": {"insert": None, "values": {"note": "hourly"}, "cron": "0 * * * *",
                   "missed": "all", "max_catch_up": 50},
    })


def test_an_insert_schedule_fires_each_tick_once(hourly: SimpleNamespace) -> None:
    shop, clock = hourly, hourly.clock
    drain(shop)
    assert rows(shop.stator, shop.reports) == []  # the first tick is 13:00
    row = schedule_row(shop.stator, "hourly")
    assert (row.state, row.next_tick) == ("active", datetime(2026, 3, 27, 13, tzinfo=UTC))
    for _ in range(3):
        clock.advance(3600)
        drain(shop)
        drain(shop)  # nothing more to fire until the next tick
    assert [r.note for r in rows(shop.stator, shop.reports)] == ["hourly"] * 3
    row = schedule_row(shop.stator, "hourly")
    assert (row.fired, row.missed) == (3, 0)
    assert row.last_tick == datetime(2026, 3, 27, 15, tzinfo=UTC)
    assert row.next_tick == datetime(2026, 3, 27, 16, tzinfo=UTC)


def test_downtime_is_caught_up_by_the_policy(hourly: SimpleNamespace) -> None:
    clock = hourly.clock
    drain(hourly)
    clock.advance(5 * 3600)  # down from 12:00 to 17:00: 13, 14, 15, 16, 17 are due
    drain(hourly)
    assert len(rows(hourly.stator, hourly.reports)) == 5
    assert schedule_row(hourly.stator, "hourly").fired == 5


def test_a_worker_whose_lease_ran_out_cannot_fire(hourly: SimpleNamespace) -> None:
    """Worker A claims the due row and stalls past its lease; worker B claims it again and
    fires.  A's firing (its insert and its next tick) is refused by the fence, as one."""
    shop, clock = hourly, hourly.clock
    drain(shop)
    clock.advance(3600)
    store = shop.stator.store
    tracked = next(t for t in store.tracked if t.name == "stator_schedules")
    [(obj_a, claim_a)] = store.claim(tracked, clock.now(), 10)
    clock.advance(ScheduleStates.active.lease + 1)
    drain(shop)  # B: claims after the lease, fires the 13:00 tick
    executor = Executor(store, clock)
    task = executor.prepare(tracked, obj_a, claim_a)
    executor.run_sync(task)  # A wakes up and fires too: refused
    assert task.lost
    assert len(rows(shop.stator, shop.reports)) == 1
    assert schedule_row(shop.stator, "hourly").fired == 1


def test_schedules_follow_the_code(
    integration, build_models, make_stator, backend, clock
) -> None:
    shop = build(integration, build_models, make_stator, backend, clock, {
        "a": {"insert": None, "every": 60}, "b": {"insert": None, "every": 60}})
    drain(shop)
    assert schedule_row(shop.stator, "a").state == "active"
    run_sql(shop.stator, "UPDATE stator_schedules SET fired = 7 WHERE name = 'b'")
    # The next deploy drops b and changes a's timing.
    later = SimpleNamespace(**vars(shop))
    later.stator = restator(shop, {"a": {"insert": None, "cron": "*/5 * * * *"}})
    five_past = datetime(2026, 3, 27, 12, 5, tzinfo=UTC).isoformat()
    assert later.stator.sync_schedules() == [
        f"schedule a: definition changed, next tick {five_past}",
        "schedule b: no longer declared, disabled"]
    b = schedule_row(shop.stator, "b")
    assert (b.state, b.fired) == ("disabled", 7)  # its history stays
    assert later.stator.sync_schedules() == []  # nothing more to change
    clock.advance(300)
    drain(later)
    assert len(rows(shop.stator, shop.reports)) == 1  # a fired once, b not at all
    # Declared again, b is active again from its next tick.
    again = restator(shop, {
        "a": {"insert": None, "cron": "*/5 * * * *"}, "b": {"insert": None, "every": 60}})
    assert again.sync_schedules() == ["schedule b: declared again, active"]
    assert schedule_row(shop.stator, "b").state == "active"


def test_a_row_fires_the_definition_it_records(
    integration, build_models, make_stator, backend, clock
) -> None:
    """Two versions of the code during a deploy: the old worker, which does not sync again,
    fires what the row says (the new definition), once per tick."""
    old = build(integration, build_models, make_stator, backend, clock, {
        "r": {"insert": None, "values": {"note": "old"}, "every": 60}})
    old.stator.sync_schedules()
    new = SimpleNamespace(**vars(old))
    new.stator = restator(old, {"r": {"insert": None, "values": {"note": "new"}, "every": 60}})
    new.stator.sync_schedules()
    clock.advance(60)
    drain(old)
    drain(new)
    assert [r.note for r in rows(old.stator, old.reports)] == ["new"]


def test_a_move_schedule_moves_the_matching_rows(
    integration, build_models, make_stator, backend, clock
) -> None:
    shop = build(integration, build_models, make_stator, backend, clock, {
        "unstick": {"move": None, "to": "new", "filter": {"state": "stuck"}, "every": 600}})
    drain(shop)
    table = "reports"
    run_sql(shop.stator, f"INSERT INTO {table} (id, state, note) VALUES (1, 'stuck', 'x')")
    run_sql(shop.stator, f"INSERT INTO {table} (id, state, note) VALUES (2, 'new', 'y')")
    clock.advance(600)
    drain(shop)
    assert {r.id: r.state for r in rows(shop.stator, shop.reports)} == {1: "new", 2: "new"}
    assert schedule_row(shop.stator, "unstick").last_outcome == "moved 1 " + (
        "reports" if not alias_of(shop.stator) else shop.reports._meta.label_lower
    ) + " row(s) to new"
    assert load(shop.stator, shop.reports, 1).state == "new"


def test_bad_schedules_are_refused_up_front(build_models, integration) -> None:
    if integration.startswith("django"):
        pytest.skip("the SQLAlchemy Stator's own check")
    shop = build_models(ReportStates, table="reports")
    with pytest.raises(ConfigError, match="not a state of ReportStates"):
        Stator("sqlite://", [shop.Order], schedules={
            "m": {"move": shop.Order, "to": "gone", "every": 60}})
    with pytest.raises(ConfigError, match="Django"):
        Stator("sqlite://", [shop.Order], schedules={"t": {"task": "a.b", "every": 60}})
    with pytest.raises(ConfigError, match="not one of this Stator's models"):
        Stator("sqlite://", [shop.Order], schedules={"i": {"insert": "nope", "every": 60}})


def test_schedules_are_seen_in_status_metrics_and_the_console(
    hourly: SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from stator.cli.status import print_status
    from stator.dashboard._dbmetrics import DatabaseCollector

    shop, clock = hourly, hourly.clock
    drain(shop)
    clock.advance(3600)
    drain(shop)
    clock.advance(90)  # 13:02: the 14:00 tick is not due; no lag
    [seen] = shop.stator.status()["schedules"]
    assert {k: seen[k] for k in ("name", "kind", "when", "state", "fired", "missed")} == {
        "name": "hourly", "kind": "insert", "when": "0 * * * * (UTC)", "state": "active",
        "fired": 1, "missed": 0}
    assert seen["last_tick"] == "2026-03-27T13:00:00+00:00"
    assert seen["next_tick"] == "2026-03-27T14:00:00+00:00"
    assert seen["lag_seconds"] == 0
    clock.advance(3600)  # 14:02, no worker ran: 120 s late
    assert shop.stator.status()["schedules"][0]["lag_seconds"] == 120
    registry = CollectorRegistry()
    registry.register(DatabaseCollector(shop.stator))
    metrics = generate_latest(registry).decode()
    fired_at = datetime(2026, 3, 27, 13, 0, 30, tzinfo=UTC).timestamp()
    values = dict(line.rsplit(" ", 1) for line in metrics.splitlines() if line[:1] != "#")
    assert float(values['stator_schedule_last_run_timestamp_seconds{schedule="hourly"}']) == (
        fired_at)
    assert 'stator_schedule_lag_seconds{schedule="hourly"} 120.0' in metrics
    print_status(shop.stator.status(), as_json=False)
    printed = capsys.readouterr().out
    assert "schedules" in printed and "hourly" in printed


def test_run_now_pause_and_resume(hourly: SimpleNamespace) -> None:
    from stator._schedule_ops import schedule_action

    shop, clock = hourly, hourly.clock
    engine = shop.stator.engine
    drain(shop)
    assert schedule_action(engine, "hourly", "run_now", clock.now(), "test") == 1
    drain(shop)
    assert len(rows(shop.stator, shop.reports)) == 1  # fired at once...
    row = schedule_row(shop.stator, "hourly")
    assert row.next_tick == datetime(2026, 3, 27, 13, tzinfo=UTC)  # ...the 13:00 tick stays
    assert schedule_action(engine, "hourly", "pause", clock.now(), "test") == 1
    assert schedule_action(engine, "hourly", "pause", clock.now(), "test") == 0
    clock.advance(3 * 3600)
    drain(shop)
    assert len(rows(shop.stator, shop.reports)) == 1  # nothing while paused
    assert schedule_action(engine, "hourly", "run_now", clock.now(), "test") == 0
    assert schedule_action(engine, "hourly", "resume", clock.now(), "test") == 1
    drain(shop)
    assert len(rows(shop.stator, shop.reports)) == 1  # what it missed paused is not caught up
    clock.advance(3600)
    drain(shop)
    assert len(rows(shop.stator, shop.reports)) == 2
    with engine.connect() as conn:
        logged = conn.execute(text(
            "SELECT action, affected FROM stator_actions ORDER BY id")).all()
    assert [tuple(r) for r in logged] == [
        ("schedule_run_now", 1), ("schedule_pause", 1), ("schedule_pause", 0),
        ("schedule_run_now", 0), ("schedule_resume", 1)]


def test_run_now_while_a_worker_fires_does_not_fire_twice(hourly: SimpleNamespace) -> None:
    """The operator's "run now" moves ``state_next``: the worker holding the row loses its
    fence, its firing is rolled back, and the next claim fires the tick once."""
    from stator._schedule_ops import schedule_action

    shop, clock = hourly, hourly.clock
    drain(shop)
    clock.advance(3600)
    store = shop.stator.store
    tracked = next(t for t in store.tracked if t.name == "stator_schedules")
    [(obj, claim)] = store.claim(tracked, clock.now(), 10)
    assert schedule_action(shop.stator.engine, "hourly", "run_now", clock.now(), "t") == 1
    executor = Executor(store, clock)
    task = executor.prepare(tracked, obj, claim)
    executor.run_sync(task)
    assert task.lost and rows(shop.stator, shop.reports) == []
    drain(shop)
    assert len(rows(shop.stator, shop.reports)) == 1
    assert schedule_row(shop.stator, "hourly").next_tick == datetime(2026, 3, 27, 14, tzinfo=UTC)


def test_the_dashboard_shows_and_steers_schedules(
    hourly: SimpleNamespace, integration: str
) -> None:
    import re

    if integration.startswith("django"):
        # In-process, Starlette's threads would each keep a Django connection open past the
        # test; the dashboard over Django runs as a process in tests/django.
        pytest.skip("the dashboard over Django's connections is tested as a process")

    from starlette.testclient import TestClient

    from stator.dashboard import create_app

    shop = hourly
    drain(shop)
    base = "http://testserver"
    app = create_app(shop.stator, token="t0ken", allowed_hosts=["testserver"])
    reader = TestClient(app, base_url=base)
    assert "hourly" not in reader.get("/schedules").text  # strangers see the sign-in page
    c = TestClient(app, base_url=base)
    assert c.post("/login", data={"token": "t0ken", "who": "ann"}, headers={"origin": base},
                  follow_redirects=False).status_code == 303
    page = c.get("/schedules").text
    assert "hourly" in page and "0 * * * * (UTC)" in page
    found = re.search(r'name="csrf" value="([0-9a-f]*)"', page)
    assert found is not None
    h = {"origin": base}
    assert c.post("/schedules/hourly/pause", data={}, headers=h,
                  follow_redirects=False).status_code == 403  # no CSRF token
    assert schedule_row(shop.stator, "hourly").state == "active"
    done = c.post("/schedules/hourly/pause", data={"csrf": found.group(1)}, headers=h)
    assert "hourly: pause done" in done.text
    assert schedule_row(shop.stator, "hourly").state == "paused"
    c.post("/schedules/hourly/resume", data={"csrf": found.group(1)}, headers=h)
    c.post("/schedules/hourly/run-now", data={"csrf": found.group(1)}, headers=h)
    drain(shop)
    assert len(rows(shop.stator, shop.reports)) == 1
