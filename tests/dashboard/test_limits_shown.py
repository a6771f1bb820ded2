"""Concurrency limits seen: running / limit per limited state and per busiest key, the same
on the overview page, in ``/metrics`` (``stator_running_rows``, ``stator_limit_saturation``)
and in ``stator status``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Integer, String, insert
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from starlette.testclient import TestClient

from stator import ManualClock, State, StateGraph, Stator
from stator._types import UTCDateTime
from stator.cli.status import print_status
from stator.dashboard import create_app
from stator.sqlalchemy import StatorMixin


class Fanout(StateGraph):
    deliver = State(timeout=10, max_running=2, limit_key="domain")
    notify = State(timeout=10, max_running=3)
    done = State()
    deliver.transitions_to(notify)
    notify.transitions_to(done)

    @classmethod
    def check_deliver(cls, row: Any) -> State:
        return cls.notify

    @classmethod
    def check_notify(cls, row: Any) -> State:
        return cls.done


class Base(DeclarativeBase):
    pass


class Delivery(StatorMixin, Base):
    __tablename__ = "deliveries"
    state_graph = Fanout
    stator_lease_column = "leased_until"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    domain: Mapped[str] = mapped_column(String(50))
    leased_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


def test_running_and_limits_are_shown_alike_everywhere(
    backend: str, clock: ManualClock, make_stator: Callable[..., Stator], capsys: Any
) -> None:
    stator = make_stator(backend, [Delivery], clock)
    now = clock.now()
    rows = [("a", "deliver")] * 5 + [("b", "deliver")] + [("x", "notify")] * 4
    with stator.engine.begin() as conn:
        conn.execute(insert(Delivery), [
            {"id": i, "domain": d, "state": s, "state_next": now - timedelta(seconds=1)}
            for i, (d, s) in enumerate(rows, 1)
        ])
    (tracked,) = stator.store.tracked
    assert len(stator.store.claim(tracked, now, 100)) == 2 + 1 + 3  # a: 2, b: 1, notify: 3

    (model,) = stator.status()["models"]
    limits = {limit["state"]: limit for limit in model["limits"]}
    assert limits["deliver"]["running"] == 3 and limits["deliver"]["key_column"] == "domain"
    assert limits["deliver"]["keys"] == [{"key": "a", "running": 2, "limit": 2},
                                         {"key": "b", "running": 1, "limit": 2}]
    assert limits["notify"]["keys"] == [{"key": None, "running": 3, "limit": 3}]
    assert limits["deliver"]["saturation"] == 1.0

    print_status(stator.status(), as_json=False)
    shown = capsys.readouterr().out
    name = model["model"]  # its label (the class name here), not its table
    assert f"{name}.deliver: 3 running, limit per domain; busiest: a 2/2, b 1/2" in shown
    assert f"{name}.notify: 3/3 running" in shown

    web = TestClient(create_app(stator, token=None, allowed_hosts=["testserver"]))
    page = web.get("/").text
    assert "a 2 / 2, b 1 / 2" in page and "3 / 3" in page
    families = {f.name: f for f in text_string_to_metric_families(web.get("/metrics").text)}
    running = {s.labels["state"]: s.value for s in families["stator_running_rows"].samples}
    assert running == {"deliver": 3, "notify": 3}
    full = {s.labels["state"]: s.value for s in families["stator_limit_saturation"].samples}
    assert full == {"deliver": 1.0, "notify": 1.0}
    assert {s.labels["model_label"] for s in families["stator_running_rows"].samples} == {
        "Delivery"}

    clock.advance(Fanout.deliver.lease)  # every lease expired: nothing runs any more
    (model,) = stator.status()["models"]
    assert [limit["running"] for limit in model["limits"]] == [0, 0]


def test_a_limit_per_key_gets_its_claim_index() -> None:
    (index,) = [ix for ix in Delivery.__table__.indexes if ix.name == "ix_deliveries_stator_domain"]
    assert [c.name for c in index.columns] == ["state", "domain", "state_next"]


def test_a_state_under_several_limits_is_one_series_at_its_fullest() -> None:
    """A task under its queue's limit and its own: ``/metrics`` has one series per state
    (two would be a duplicate sample, refused by Prometheus), at the fullest limit."""
    from stator._store._limit_usage import LimitUsage, StateLimit
    from stator.dashboard._dbmetrics import _limit_metrics

    queue = StateLimit("t", "ready", "queue_name", 3, None,
                       (LimitUsage("t", "ready", "mail", 3, 4),))
    task = StateLimit("t", "ready", "task_path", 3, None,
                      (LimitUsage("t", "ready", "app.send", 2, 2),))
    running, saturation = _limit_metrics([queue, task], {"t": "stator.StatorTask"})
    assert [(s.labels["state"], s.value) for s in running.samples] == [("ready", 3)]
    assert [(s.labels["state"], s.value) for s in saturation.samples] == [("ready", 1.0)]
