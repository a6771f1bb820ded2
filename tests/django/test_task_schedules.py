"""``STATOR["SCHEDULE"]`` task schedules through the ``django.tasks`` backend, on SQLite
("default") and PostgreSQL ("pg"): each tick is one ordinary task, enqueued in the
transaction that moves the schedule on, and never by a worker whose lease ran out."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

pytest.importorskip("django.tasks", reason="the task backend needs Django >= 6.0")

from django.test import override_settings

from stator import ManualClock, Stator
from stator._execute import Executor
from stator._schedules import ScheduleStates
from stator.django._schedule_model import StatorSchedule
from stator.django._setup import build_stator, stator_models
from stator.django._task_model import StatorTask

BACKEND = "stator.django.tasks.StatorBackend"
START = datetime(2026, 10, 24, 23, 59, 30, tzinfo=UTC)

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "pg"]),
    pytest.mark.parametrize("alias", ["default", "pg"]),
]

SCHEDULE = {
    "adder": {"task": "tasks_jobs.add", "args": [2, 3], "every": 60, "missed": "all",
              "max_catch_up": 10},
    "nightly": {"task": "tasks_jobs.shout", "kwargs": {"text": "night"}, "queue": "mail",
                "cron": "30 2 * * *", "timezone": "Europe/Paris"},
}


@pytest.fixture
def scheduled(alias: str) -> Iterator[str]:
    with override_settings(
        TASKS={"default": {"BACKEND": BACKEND, "QUEUES": ["default", "mail"]}},
        STATOR={"DATABASE": alias, "SCHEDULE": SCHEDULE},
    ):
        yield alias
    # Django's flush between tests leaves unmanaged tables alone.
    StatorSchedule.objects.using(alias).all().delete()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


def engine(alias: str, clock: ManualClock) -> Stator:
    stator = build_stator(clock=clock, alias=alias, models=[StatorTask, StatorSchedule],
                          options={"queues": None})
    return stator


def drain(stator: Stator) -> None:
    while stator.run_once().claimed:
        pass


def test_schedules_are_run_only_when_declared(scheduled: str) -> None:
    assert StatorSchedule in stator_models()
    with override_settings(STATOR={"DATABASE": scheduled}):
        assert StatorSchedule not in stator_models()


def test_each_tick_is_one_task_run_as_usual(scheduled: str, clock: ManualClock) -> None:
    stator = engine(scheduled, clock)
    drain(stator)
    assert StatorTask.objects.using(scheduled).count() == 0  # first tick: 00:00 UTC
    clock.advance(30)
    drain(stator)
    clock.advance(120)
    drain(stator)
    tasks = list(StatorTask.objects.using(scheduled).order_by("run_after"))
    assert [t.run_after for t in tasks] == [
        datetime(2026, 10, 25, 0, m, tzinfo=UTC) for m in range(3)]
    assert {(t.task_path, t.state, t.return_value) for t in tasks} == {
        ("tasks_jobs.add", "successful", 5)}
    row = StatorSchedule.objects.using(scheduled).get(pk="adder")
    assert (row.fired, row.state) == (3, "active")
    assert row.last_outcome == f"2 ticks: enqueued task {tasks[-1].id}"  # 00:01 and 00:02


def test_the_dst_night_runs_the_nightly_job_once(scheduled: str, clock: ManualClock) -> None:
    """25 October 2026, Paris: 02:00-03:00 happens twice; the 02:30 job runs once."""
    stator = engine(scheduled, clock)
    drain(stator)
    for _ in range(6 * 4):  # through the night, a quarter of an hour at a time
        clock.advance(900)
        drain(stator)
    nightly = StatorTask.objects.using(scheduled).filter(task_path="tasks_jobs.shout")
    assert [t.run_after for t in nightly] == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC)]


def test_a_worker_past_its_lease_enqueues_nothing(scheduled: str, clock: ManualClock) -> None:
    stator = engine(scheduled, clock)
    drain(stator)
    clock.advance(30)
    store = stator.store
    tracked = next(t for t in store.tracked if t.name == "stator_schedules")
    [(late_obj, late_claim)] = [
        pair for pair in store.claim(tracked, clock.now(), 10) if pair[1].pk == "adder"]
    clock.advance(ScheduleStates.active.lease + 1)
    drain(stator)  # another worker fired the tick (and the one after, on the way)
    before = StatorTask.objects.using(scheduled).count()
    executor = Executor(store, clock)
    task = executor.prepare(tracked, late_obj, late_claim)
    executor.run_sync(task)
    assert task.lost
    assert StatorTask.objects.using(scheduled).count() == before
    assert StatorTask.objects.using(scheduled).values("run_after").distinct().count() == before


def test_the_admin_pauses_resumes_and_runs_now_with_change_permission(
    scheduled: str, clock: ManualClock
) -> None:
    from django.contrib.auth.models import Permission, User
    from django.test import Client

    if scheduled != "default":
        pytest.skip("the admin reads the default database")
    engine(scheduled, clock).sync_schedules()

    def staff(name: str, *codenames: str) -> Client:
        user = User.objects.create_user(name, password="pw", is_staff=True)
        user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
        client = Client()
        client.force_login(user)
        return client

    url = "/admin/stator/statorschedule/"
    viewer = staff("viewer", "view_statorschedule")
    listing = viewer.get(url).content.decode()
    assert "adder" in listing and "every 60s" in listing and "schedule_pause" not in listing
    assert viewer.post(url, {"action": "schedule_pause", "_selected_action": ["adder"]}
                       ).status_code == 403
    assert StatorSchedule.objects.get(pk="adder").state == "active"
    clerk = staff("clerk", "view_statorschedule", "change_statorschedule")
    for action, state in (("schedule_pause", "paused"), ("schedule_resume", "active")):
        assert clerk.post(url, {"action": action, "_selected_action": ["adder"]}
                          ).status_code == 302
        assert StatorSchedule.objects.get(pk="adder").state == state
    clerk.post(url, {"action": "schedule_run_now", "_selected_action": ["adder"]})
    row = StatorSchedule.objects.get(pk="adder")
    assert row.state_next is not None and row.next_tick == row.state_next
