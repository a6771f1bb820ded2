"""What a task that goes wrong leaves behind, on SQLite ("default") and PostgreSQL ("pg").

Django's docs: "If the Task doesn't succeed, and instead raises an exception, either as part
of the Task or as part of running it, the exception and traceback are saved to the
TaskResult.errors list", and FAILED is "raised an exception during execution, or was unable
to start".  So: a ``BaseException`` from the task, a task that cannot be loaded, a task past
its timeout and an error around the task all end with their reason in ``errors``; a RUNNING
task has its start times; the worker's handler thread carries on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the task backend needs Django >= 6.0")

import tasks_jobs
from django.tasks import TaskResultStatus, default_task_backend
from django.tasks.exceptions import InvalidTask, TaskResultMismatch
from django.tasks.signals import task_finished, task_started
from task_settings import stator_tasks

from stator import ManualClock, Stator
from stator.django._setup import build_stator
from stator.django._task_model import StatorTask, TaskStates

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "pg"]),
    pytest.mark.parametrize("alias", ["default", "pg"]),
]


@pytest.fixture
def tasks(alias: str) -> Iterator[str]:
    """Three attempts allowed: what fails at once below does so whatever max_attempts says."""
    with stator_tasks(alias, concurrency=1, max_attempts=3, retry_after=10):
        yield alias


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC) + timedelta(seconds=1))


@pytest.fixture
def finished() -> Iterator[list[Any]]:
    """The results ``task_finished`` was sent with, in order."""
    seen: list[Any] = []

    def receiver(sender: Any, task_result: Any, **_kw: Any) -> None:
        seen.append(task_result)

    task_finished.connect(receiver)
    try:
        yield seen
    finally:
        task_finished.disconnect(receiver)


def engine(alias: str, clock: ManualClock) -> Stator:
    return build_stator(models=[StatorTask], clock=clock, alias=alias)


def run(stator: Stator, cycles: int = 3) -> None:
    for _ in range(cycles):
        stator.run_once(raise_errors=False)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def row(alias: str, result_id: str) -> StatorTask:
    return StatorTask.objects.using(alias).get(pk=result_id)


# -- 1. BaseException from the task --------------------------------------------------------

@pytest.mark.parametrize("kind", ["SystemExit", "KeyboardInterrupt", "GeneratorExit"])
def test_a_base_exception_from_the_task_fails_it_at_once(
    tasks: str, clock: ManualClock, finished: list[Any], kind: str
) -> None:
    result = tasks_jobs.raise_base.enqueue(kind)
    run(engine(tasks, clock))
    done = tasks_jobs.raise_base.get_result(result.id)
    assert done.status == TaskResultStatus.FAILED
    assert done.attempts == 1  # not retried, although max_attempts is 3
    assert [e.exception_class_path for e in done.errors] == [f"builtins.{kind}"]
    assert f"{kind} from the task" in done.errors[0].traceback
    assert done.started_at is not None and done.finished_at is not None
    assert [(r.id, r.status) for r in finished] == [(result.id, TaskResultStatus.FAILED)]


def test_the_worker_thread_carries_on_after_a_base_exception(tasks: str) -> None:
    """A real worker (one handler thread): the thread is not lost, the next task runs."""
    failed = tasks_jobs.raise_base.enqueue("SystemExit")
    added = tasks_jobs.add.enqueue(1, 2)
    summary = build_stator(models=[StatorTask], alias=tasks, concurrency=1).worker(
        until_idle=True, idle_window=0.2,
    ).run()
    assert summary.reason == "idle" and summary.threads_replaced == 0
    assert tasks_jobs.raise_base.get_result(failed.id).status == TaskResultStatus.FAILED
    assert tasks_jobs.add.get_result(added.id).return_value == 3


# -- 2. A task that cannot start -------------------------------------------------------------

UNLOADABLE = {
    "renamed": ("tasks_jobs.renamed_since", "builtins.ImportError"),
    "broken module": ("tasks_broken.anything", "builtins.ModuleNotFoundError"),
    "not a task": ("tasks_jobs.not_a_task", "django.tasks.exceptions.InvalidTask"),
}


@pytest.mark.parametrize("case", list(UNLOADABLE))
def test_a_task_that_cannot_start_fails_at_once_and_still_reads(
    tasks: str, clock: ManualClock, finished: list[Any], case: str
) -> None:
    path, error = UNLOADABLE[case]
    result = tasks_jobs.add.enqueue(1, 1)
    StatorTask.objects.using(tasks).filter(pk=result.id).update(task_path=path)
    waiting = default_task_backend.get_result(result.id)  # no ImportError: a stand-in task
    assert waiting.status == TaskResultStatus.READY and waiting.task.module_path == path
    started: list[Any] = []
    task_started.connect(receiver := lambda sender, task_result, **kw: started.append(1))
    try:
        run(engine(tasks, clock))
    finally:
        task_started.disconnect(receiver)
    done = default_task_backend.get_result(result.id)
    assert done.status == TaskResultStatus.FAILED
    assert done.attempts == 1  # not retried, although max_attempts is 3
    assert [e.exception_class_path for e in done.errors] == [error]
    assert "Traceback (most recent call last)" in done.errors[0].traceback
    assert started == [] and [r.status for r in finished] == [TaskResultStatus.FAILED]
    waiting.refresh()
    assert waiting.status == TaskResultStatus.FAILED
    with pytest.raises(InvalidTask, match="cannot be loaded"):
        done.task.call(1, 1)
    with pytest.raises(TaskResultMismatch):
        tasks_jobs.add.get_result(result.id)


# -- 3. Start times while RUNNING ------------------------------------------------------------

def test_a_running_task_has_its_start_times(tasks: str, clock: ManualClock) -> None:
    result = tasks_jobs.own_times.enqueue()
    run(engine(tasks, clock))
    status, started, attempted = tasks_jobs.own_times.get_result(result.id).return_value
    assert status == "RUNNING"
    assert started == attempted == clock.now().isoformat()  # stamped by the claim
    done = tasks_jobs.own_times.get_result(result.id)
    assert done.started_at == done.last_attempted_at == clock.now()


def test_a_retry_keeps_its_first_start(tasks: str, clock: ManualClock) -> None:
    result = tasks_jobs.fail.enqueue("again")
    stator = engine(tasks, clock)
    first = clock.now()
    run(stator)
    clock.advance(15)
    run(stator)
    again = tasks_jobs.fail.get_result(result.id)
    assert again.attempts == 2
    assert again.started_at == first and again.last_attempted_at == clock.now()


# -- 5. Timeouts and errors around the task --------------------------------------------------

def test_a_task_past_its_timeout_says_so(
    tasks: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real worker abandons the task at its timeout; the last stall allowed makes it
    FAILED, with a TimeoutError naming the limit and where the task was."""
    monkeypatch.setattr(TaskStates.states["ready"], "timeout", 0.5)
    tasks_jobs.released.clear()
    result = tasks_jobs.wait_for_release.enqueue()
    StatorTask.objects.using(tasks).filter(pk=result.id).update(state_attempts=2)
    worker = build_stator(models=[StatorTask], alias=tasks, concurrency=1).worker()

    def run_worker() -> None:
        try:
            worker.run()
        finally:
            worker.store.thread_done()  # this thread's connection, as runstator closes it

    thread = threading.Thread(target=run_worker)
    thread.start()
    try:
        wait_for(lambda: row(tasks, result.id).state == "failed", "the task to be abandoned")
    finally:
        tasks_jobs.released.set()
        worker.stop("test over")
        thread.join(30)
    # The abandoned thread ends once released, closing its connection.
    wait_for(lambda: not any(t.name.startswith("stator-handler") and t.is_alive()
                             for t in threading.enumerate()), "the abandoned thread to end")
    done = tasks_jobs.wait_for_release.get_result(result.id)
    assert done.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in done.errors] == ["builtins.TimeoutError"]
    assert "did not finish within its timeout of 0.5s" in done.errors[0].traceback
    assert "wait_for_release" in done.errors[0].traceback  # where it was at the deadline
    assert done.attempts == 1 and done.started_at is not None
    assert done.finished_at is not None


def test_an_error_around_the_task_is_kept_until_it_fails(
    tasks: str, clock: ManualClock
) -> None:
    """A ``task_started`` receiver that raises: a stall of the engine's, retried; each one
    in ``errors``, and the last makes the task FAILED."""
    def receiver(sender: Any, task_result: Any, **_kw: Any) -> None:
        raise RuntimeError("a receiver broke")

    result = tasks_jobs.add.enqueue(1, 1)
    stator = engine(tasks, clock)
    task_started.connect(receiver)
    try:
        run(stator)
        waiting = tasks_jobs.add.get_result(result.id)
        assert waiting.status == TaskResultStatus.READY
        assert [e.exception_class_path for e in waiting.errors] == ["builtins.RuntimeError"]
        for _ in range(3):
            clock.advance(3600)
            run(stator)
    finally:
        task_started.disconnect(receiver)
    done = tasks_jobs.add.get_result(result.id)
    assert done.status == TaskResultStatus.FAILED
    assert len(done.errors) == 3 and "a receiver broke" in done.errors[-1].traceback
    assert done.finished_at is not None
