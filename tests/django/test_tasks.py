"""The ``django.tasks`` backend in-process, on SQLite ("default") and PostgreSQL ("pg").

Tasks are enqueued through Django's API and run by the engine's inline cycle
(``Stator.run_once``) with a manual clock, so deferrals, backoff and result expiry are
jumped over rather than waited for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the task backend needs Django >= 6.0")

import tasks_jobs
from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django.tasks import TaskResultStatus
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.test import override_settings
from djtest.orders.models import Order, OrderStates, Receipt
from task_settings import BACKEND, stator_tasks

from stator import ManualClock, Stator
from stator.django._setup import build_stator
from stator.django._task_model import StatorTask
from stator.django.tasks import StatorBackend

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "pg"]),
    pytest.mark.parametrize("alias", ["default", "pg"]),
]


@pytest.fixture
def tasks(alias: str) -> Iterator[str]:
    """Stator's backend configured (tasks stored in ``alias``), as in the issue's settings."""
    with stator_tasks(alias, max_attempts=3, retry_after=10):
        yield alias


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC) + timedelta(seconds=1))


def engine(
    alias: str, clock: ManualClock, *models: type, queues: list[str] | None = None
) -> Stator:
    return build_stator(
        models=list(models) or [StatorTask], clock=clock, alias=alias,
        options={"queues": queues},
    )


def run(stator: Stator, cycles: int = 4) -> None:
    for _ in range(cycles):
        stator.run_once()


def test_enqueue_run_and_result(tasks: str, clock: ManualClock) -> None:
    seen: list[tuple[str, str]] = []

    def record(name: str) -> Any:
        def receiver(sender: Any, task_result: Any, **_kw: Any) -> None:
            seen.append((name, str(task_result.status)))
        return receiver

    receivers = [record("enqueued"), record("started"), record("finished")]
    for signal, receiver in zip((task_enqueued, task_started, task_finished), receivers,
                                strict=True):
        signal.connect(receiver)
    try:
        result = tasks_jobs.add.enqueue(2, 3)
        assert result.status == TaskResultStatus.READY
        assert tasks_jobs.add.get_result(result.id).status == TaskResultStatus.READY
        run(engine(tasks, clock))
    finally:
        for signal, receiver in zip((task_enqueued, task_started, task_finished), receivers,
                                    strict=True):
            signal.disconnect(receiver)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.attempts == 1 and result.errors == []
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert seen == [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "SUCCESSFUL")]
    assert StatorTask.objects.using(tasks).get(pk=result.id).state == "successful"


def test_a_task_reads_running_while_it_runs(tasks: str, clock: ManualClock) -> None:
    """RUNNING is read from the row: the claim that started the task holds its lease."""
    result = tasks_jobs.own_status.enqueue()
    run(engine(tasks, clock))
    done = tasks_jobs.own_status.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == "RUNNING"
    row = StatorTask.objects.using(tasks).get(pk=result.id)
    assert row.leased_until is not None and row.leased_until != row.state_next


def test_rolled_back_enqueue_leaves_no_task(tasks: str) -> None:
    announced: list[Any] = []

    def receiver(sender: Any, task_result: Any, **_kw: Any) -> None:
        announced.append(task_result)

    task_enqueued.connect(receiver)
    try:
        with transaction.atomic(using=tasks):
            result = tasks_jobs.add.enqueue(4, 4)
            transaction.set_rollback(True, using=tasks)
    finally:
        task_enqueued.disconnect(receiver)
    with pytest.raises(TaskResultDoesNotExist):
        tasks_jobs.add.get_result(result.id)
    assert announced == []


def test_deferred_task_stays_ready_until_run_after(tasks: str, clock: ManualClock) -> None:
    later = tasks_jobs.add.using(run_after=clock.now() + timedelta(hours=1)).enqueue(1, 1)
    stator = engine(tasks, clock)
    run(stator)
    assert tasks_jobs.add.get_result(later.id).status == TaskResultStatus.READY
    clock.advance(3601)
    run(stator)
    assert tasks_jobs.add.get_result(later.id).return_value == 2


def test_a_task_is_timed_by_the_workers_clock(tasks: str, clock: ManualClock) -> None:
    # The engine's clock is the one source of time: a worker whose clock a test set an hour
    # ahead stamps the task's start and finish by it, not by the system's.
    clock.advance(3600)
    started = clock.now()
    result = tasks_jobs.take_a_minute.enqueue()
    tasks_jobs.CLOCKS[:] = [clock]
    try:
        run(engine(tasks, clock))
    finally:
        tasks_jobs.CLOCKS.clear()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.started_at == started
    assert result.finished_at == started + timedelta(seconds=60) == clock.now()


def test_failures_are_retried_with_backoff_then_failed(tasks: str, clock: ManualClock) -> None:
    result = tasks_jobs.fail.enqueue("nope")
    stator = engine(tasks, clock)
    run(stator)
    first = tasks_jobs.fail.get_result(result.id)
    assert first.status == TaskResultStatus.READY  # waiting for its next attempt
    assert [e.exception_class_path for e in first.errors] == ["builtins.ValueError"]
    row = StatorTask.objects.using(tasks).get(pk=result.id)
    assert row.state_next >= clock.now() + timedelta(seconds=9)  # backoff: 10 s, then 20 s
    clock.advance(10)
    run(stator)
    assert len(tasks_jobs.fail.get_result(result.id).errors) == 2
    clock.advance(20)
    run(stator)
    final = tasks_jobs.fail.get_result(result.id)
    assert final.status == TaskResultStatus.FAILED
    assert final.attempts == 3 and len(final.errors) == 3
    assert final.errors[-1].exception_class is ValueError
    assert "ValueError: nope" in final.errors[-1].traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = final.return_value


def test_a_failed_task_writes_nothing_but_its_error(tasks: str, clock: ManualClock) -> None:
    order = Order.objects.using(tasks).create(paid=False)
    result = tasks_jobs.write_then_fail.enqueue(tasks, order.pk)
    run(engine(tasks, clock))
    assert Receipt.objects.using(tasks).count() == 0
    errors = tasks_jobs.write_then_fail.get_result(result.id).errors
    assert [e.exception_class_path for e in errors] == ["builtins.RuntimeError"]


@pytest.mark.parametrize("then_fail", [False, True])
def test_tasks_own_atomic_blocks_nest_in_the_attempt(
    tasks: str, clock: ManualClock, then_fail: bool
) -> None:
    order = Order.objects.using(tasks).create(paid=False)
    result = tasks_jobs.write_in_atomic.enqueue(tasks, order.pk, then_fail)
    run(engine(tasks, clock))
    done = tasks_jobs.write_in_atomic.get_result(result.id)
    if then_fail:
        assert [e.exception_class_path for e in done.errors] == ["builtins.RuntimeError"]
        assert Receipt.objects.using(tasks).count() == 0
    else:
        assert done.status == TaskResultStatus.SUCCESSFUL and done.errors == []
        assert Receipt.objects.using(tasks).get().pk == done.return_value


def test_task_enqueued_by_a_failing_handler_is_rolled_back_with_it(
    tasks: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    def check_new(order: Any) -> Any:
        tasks_jobs.shout.enqueue(f"order {order.pk}")
        if order.note == "fail":
            raise RuntimeError("the handler failed after enqueueing")
        return OrderStates.charged

    monkeypatch.setattr(OrderStates.states["new"], "handler", check_new)
    good = Order.objects.using(tasks).create(paid=True)
    Order.objects.using(tasks).create(paid=True, note="fail")
    with pytest.raises(RuntimeError):
        engine(tasks, clock, Order).run_once()
    rows = list(StatorTask.objects.using(tasks).values_list("args_kwargs", flat=True))
    assert rows == [{"args": [f"order {good.pk}"], "kwargs": {}}]


def test_a_worker_runs_only_its_queues(tasks: str, clock: ManualClock) -> None:
    default = tasks_jobs.add.enqueue(1, 1)
    mail = tasks_jobs.shout.enqueue("hi")
    run(engine(tasks, clock, queues=["mail"]))
    assert tasks_jobs.shout.get_result(mail.id).return_value == "HI"
    assert tasks_jobs.add.get_result(default.id).status == TaskResultStatus.READY
    run(engine(tasks, clock))  # no --queue: every queue
    assert tasks_jobs.add.get_result(default.id).return_value == 2


def test_higher_priority_tasks_run_first(tasks: str, clock: ManualClock) -> None:
    """``supports_priority``: of the due tasks, a worker takes the highest priority first
    (then the oldest), whatever order they were enqueued in."""
    assert StatorBackend.supports_priority
    low = {tasks_jobs.add.using(priority=-5).enqueue(i, 0).id for i in range(3)}
    normal = {tasks_jobs.add.enqueue(i, 1).id for i in range(3)}
    high = {tasks_jobs.add.using(priority=50).enqueue(i, 2).id for i in range(3)}
    started: list[str] = []

    def receiver(sender: Any, task_result: Any, **_kw: Any) -> None:
        started.append(task_result.id)

    task_started.connect(receiver)
    try:
        run(build_stator(models=[StatorTask], clock=clock, alias=tasks, batch_size=3), 10)
    finally:
        task_started.disconnect(receiver)
    assert sorted(started) == sorted(low | normal | high)
    assert set(started[:3]) == high
    assert set(started[3:5]) <= normal


def test_bad_input_fails_at_enqueue(tasks: str) -> None:
    with pytest.raises(TypeError):
        tasks_jobs.add.enqueue(object(), 1)
    with pytest.raises(InvalidTask, match="Queue 'nowhere' is not valid"):
        tasks_jobs.add.using(queue_name="nowhere")
    assert not StatorTask.objects.using(tasks).exists()


@pytest.mark.parametrize("poison", [
    pytest.param(["a\x00b"], id="nul"), pytest.param({"x\x00": 1}, id="nul-in-key"),
    pytest.param("\udc80", id="lone-surrogate"), pytest.param(float("nan"), id="nan"),
    pytest.param([float("inf")], id="infinity"),
])
def test_an_argument_the_database_would_refuse_leaves_the_transaction_usable(
    tasks: str, poison: Any
) -> None:
    """PostgreSQL refuses these in jsonb and aborts the transaction; SQLite would store
    them.  Both refuse them before the INSERT, with Django's error for a bad value."""
    with transaction.atomic(using=tasks):
        with pytest.raises(ValueError, match=r"NUL character|lone surrogate|JSON cannot hold"):
            tasks_jobs.add.enqueue(poison, 1)
        order = Order.objects.using(tasks).create(paid=True)  # the block still writes
        kept = tasks_jobs.add.enqueue(order.pk, 1)
    assert Order.objects.using(tasks).filter(pk=order.pk).exists()
    assert list(StatorTask.objects.using(tasks).values_list("pk", flat=True)) == [kept.id]


def test_arguments_over_the_size_limit_are_refused_at_enqueue(tasks: str) -> None:
    with pytest.raises(ValueError, match="over the backend's limit of 1048576"):
        tasks_jobs.add.enqueue("é" * (512 * 1024), 1)  # 1 MiB of UTF-8, and a bit
    tasks_jobs.add.enqueue("é" * (512 * 1024 - 40), 1)
    small = {"default": {"BACKEND": BACKEND, "OPTIONS": {"max_arguments_bytes": 64}}}
    with override_settings(TASKS=small), pytest.raises(ValueError, match="limit of 64 "):
        tasks_jobs.add.enqueue("x" * 64, 1)
    unlimited = {"default": {"BACKEND": BACKEND, "OPTIONS": {"max_arguments_bytes": None}}}
    with override_settings(TASKS=unlimited):
        tasks_jobs.add.enqueue("x" * (2 * 1024 * 1024), 1)
    assert StatorTask.objects.using(tasks).count() == 2


def test_context_async_and_unserialisable_results(tasks: str, clock: ManualClock) -> None:
    attempt = tasks_jobs.attempt_number.enqueue()
    summed = tasks_jobs.async_add.enqueue(20, 22)
    odd = tasks_jobs.returns_object.enqueue()
    run(engine(tasks, clock))
    assert tasks_jobs.attempt_number.get_result(attempt.id).return_value == 1
    assert tasks_jobs.async_add.get_result(summed.id).return_value == 42
    errors = tasks_jobs.returns_object.get_result(odd.id).errors
    assert errors and errors[0].exception_class_path == "builtins.TypeError"


def test_aenqueue_and_aget_result(tasks: str, clock: ManualClock) -> None:
    async def enqueue() -> Any:
        try:
            return await tasks_jobs.add.aenqueue(5, 6)
        finally:  # the async ORM's thread keeps a connection of its own
            await sync_to_async(connections.close_all)()

    result = asyncio.run(enqueue())
    run(engine(tasks, clock))

    async def fetch() -> Any:
        try:
            return await tasks_jobs.add.aget_result(result.id)
        finally:
            await sync_to_async(connections.close_all)()

    fetched = asyncio.run(fetch())
    assert (fetched.status, fetched.return_value) == (TaskResultStatus.SUCCESSFUL, 11)


def test_results_are_deleted_after_keep_results(tasks: str, clock: ManualClock) -> None:
    result = tasks_jobs.add.enqueue(1, 2)
    stator = engine(tasks, clock)
    run(stator)
    clock.advance(6 * 24 * 3600)
    run(stator)
    assert tasks_jobs.add.get_result(result.id).return_value == 3
    clock.advance(2 * 24 * 3600)
    run(stator)
    with pytest.raises(TaskResultDoesNotExist):
        tasks_jobs.add.get_result(result.id)


def test_queue_limits_bound_the_running_tasks_of_a_queue(alias: str, clock: ManualClock) -> None:
    """``OPTIONS["QUEUE_LIMITS"]``: at most one ``mail`` task held at once, across every
    worker; other queues unlimited."""
    with stator_tasks(alias, QUEUE_LIMITS={"mail": 1}):
        mail = [tasks_jobs.shout.enqueue(str(i)) for i in range(3)]
        default = [tasks_jobs.add.enqueue(i, 1) for i in range(3)]
        stator = engine(alias, clock)
        (tracked,) = stator.store.tracked
        assert tracked.limits["ready"][0] == {"mail": 1}
        claimed = {c.pk for _o, c in stator.store.claim(tracked, clock.now(), 10)}
        # One mail task, whichever: tasks enqueued within the same millisecond (SQLite's
        # default due time) or transaction (PostgreSQL's ``now()``) are due at the same time.
        assert len(claimed & {r.id for r in mail}) == 1
        assert claimed - {r.id for r in mail} == {r.id for r in default}
        assert stator.store.claim(tracked, clock.now(), 10) == []  # mail's room is taken
        clock.advance(StatorTask.state_graph.ready.lease)  # that worker died: its lease ran out
        run(stator, 8)
        assert [tasks_jobs.shout.get_result(r.id).return_value for r in mail] == ["0", "1", "2"]


@pytest.mark.parametrize("limits", [{"mail": 0}, ["mail"], {"mail": "2"}])
def test_a_wrong_queue_limit_is_refused(alias: str, limits: Any) -> None:
    from django.core.exceptions import ImproperlyConfigured

    settings = {"default": {"BACKEND": BACKEND, "OPTIONS": {"QUEUE_LIMITS": limits}}}
    with override_settings(TASKS=settings), pytest.raises(ImproperlyConfigured, match="QUEUE"):
        StatorTask.stator_claim_limits()
