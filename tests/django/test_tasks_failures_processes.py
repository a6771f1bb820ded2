"""Why tasks failed, as a real worker process (``manage.py runstator --until-idle``) records
it on SQLite and PostgreSQL: a task raising ``SystemExit``, a task whose function is gone and
a task past its timeout each end FAILED with their reason in ``errors``, and the worker goes
on to run the next task and exits normally."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("django.tasks", reason="the task backend needs Django >= 6.0")

from tasks_conformance import test_conformance_worker as processes
from tasks_conformance.test_conformance_worker import manage, shell

# The project on a SQLite file or a throwaway PostgreSQL database (the worker suite's fixture).
project_env = processes.project_env

pytestmark = pytest.mark.slow


def test_a_worker_records_why_each_task_failed(
    project_env: dict[str, str], tmp_path: Path
) -> None:
    env = project_env  # tasks time out after 3 s
    manage(env, "migrate", "-v", "0")
    markers = tmp_path / "markers"
    markers.mkdir()
    ids = shell(env, (
        "from jobs import exits, noop, slow_first_time\n"
        "from stator.django.models import StatorTask\n"
        "gone = noop.enqueue()\n"
        "StatorTask.objects.filter(pk=gone.id).update(task_path='jobs.renamed_since')\n"
        f"hung = slow_first_time.enqueue({str(markers)!r})\n"
        "StatorTask.objects.filter(pk=hung.id).update(state_attempts=2)  # its last stall\n"
        "out = [exits.enqueue(3).id, gone.id, hung.id, noop.enqueue().id]"
    ))
    manage(env, "runstator", "--until-idle")
    results = shell(env, (
        "from django.tasks import default_task_backend as backend\n"
        "out = []\n"
        f"for i in {ids!r}:\n"
        "    r = backend.get_result(i)\n"
        "    out.append([str(r.status), [e.exception_class_path for e in r.errors],\n"
        "                r.attempts, r.started_at is not None, r.errors[-1].traceback\n"
        "                if r.errors else ''])\n"
    ))
    assert isinstance(results, list)
    assert [r[:4] for r in results] == [
        ["FAILED", ["builtins.SystemExit"], 1, True],
        ["FAILED", ["builtins.ImportError"], 1, True],
        ["FAILED", ["builtins.TimeoutError"], 1, True],
        ["SUCCESSFUL", [], 1, True],
    ]
    assert "within its timeout of 3s" in results[2][4]
