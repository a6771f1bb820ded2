"""The worker's side of the conformance suite, with real worker processes (``manage.py
runstator``) on SQLite and PostgreSQL: a worker SIGKILLed in the middle of a task, and one
asked to stop (SIGTERM) while a task runs.

Django leaves the worker to the backend; what a user of a database backend expects is that no
task is lost or left RUNNING for ever (the reference database backend leaves a killed
worker's task RUNNING) and that a polite stop lets the task in flight finish.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("django.tasks", reason="the task backend needs Django >= 6.0")

from test_tasks_shop import throwaway_pg_database

ROOT = Path(__file__).resolve().parents[3]
PROJECT = Path(__file__).parents[1] / "taskproj"
TIMEOUT = 120

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgresql"])
def project_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{PROJECT}",
           "TASKPROJ_TIMEOUT": "3"}
    if request.param == "sqlite":
        env["TASKPROJ_SQLITE"] = str(tmp_path / "tasks.db")
        yield env
        return
    with throwaway_pg_database() as url:
        env["TASKPROJ_PG"] = url
        yield env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(PROJECT / "manage.py"), *args], env=env, capture_output=True,
        text=True, timeout=TIMEOUT,
    )
    assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def shell(env: dict[str, str], code: str) -> object:
    """Run ``code`` (which sets ``out``) in the project and return ``out``."""
    program = f"import json\n{code}\nprint(json.dumps(out, default=str))"
    return json.loads(manage(env, "shell", "-c", program).strip().splitlines()[-1])


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_killed_worker_task_is_retried_after_its_lease(
    project_env: dict[str, str], tmp_path: Path
) -> None:
    env = project_env
    manage(env, "migrate", "-v", "0")
    markers = tmp_path / "markers"
    markers.mkdir()
    task_id = shell(env, f"from jobs import slow_first_time\n"
                         f"out = slow_first_time.enqueue({str(markers)!r}).id")

    worker = subprocess.Popen(
        [sys.executable, str(PROJECT / "manage.py"), "runstator"], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: (markers / "run-0").exists(), "the task to start")
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=TIMEOUT)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    status = f"from jobs import noop\nout = str(noop.get_backend().get_result({task_id!r}).status)"
    assert shell(env, status) == "RUNNING"

    # After the lease (twice the 3 s timeout) the next worker takes the task over.
    lease_over = ("from django.utils import timezone\n"
                  "from stator.django.models import StatorTask\n"
                  f"out = StatorTask.objects.get(pk={task_id!r}).state_next <= timezone.now()")
    wait_for(lambda: bool(shell(env, lease_over)), "the lease to run out", timeout=TIMEOUT)
    manage(env, "runstator", "--until-idle")

    result = shell(env, (
        "from jobs import noop\n"
        f"r = noop.get_backend().get_result({task_id!r})\n"
        "out = [str(r.status), r.return_value, r.attempts, len(r.errors)]"
    ))
    assert result == ["SUCCESSFUL", "done", 1, 0]
    assert sorted(p.name for p in markers.iterdir()) == ["run-0", "run-1"]


def test_a_stopped_worker_lets_the_task_in_flight_finish(
    project_env: dict[str, str], tmp_path: Path
) -> None:
    """SIGTERM while a task runs: the task ends SUCCESSFUL, once, and the worker exits 0."""
    env = project_env
    manage(env, "migrate", "-v", "0")
    marker = tmp_path / "started"
    task_id = shell(env, f"from jobs import announced_sleep\n"
                         f"out = announced_sleep.enqueue({str(marker)!r}, 1.5).id")
    worker = subprocess.Popen(
        [sys.executable, str(PROJECT / "manage.py"), "runstator"], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for(marker.exists, "the task to start")
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=TIMEOUT)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, err
    result = shell(env, (
        "from jobs import noop\n"
        f"r = noop.get_backend().get_result({task_id!r})\n"
        "out = [str(r.status), r.return_value, r.attempts, len(r.errors)]"
    ))
    assert result == ["SUCCESSFUL", "slept", 1, 0]
