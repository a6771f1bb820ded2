"""What a ``runstator`` worker process loads: not SQLAlchemy's ORM (the Django driver holds
only the engine's shared SQL parts), not rich while its output is no terminal, not the
dashboard's web stack nor the admin's graph layout (grandalf, numpy), nor SQLAlchemy's dialect
for the other database (PostgreSQL's, with asyncpg's, on SQLite); nor, of Stator's own, what
only the dashboard reads (``_store._dashboard``: a stats period's edge counts are rows of
``_records``), nor the records the readers get back (``_read_records``), nor the schedules'
definitions and ticks (``_schedule``, cronsim) in a project that declares no schedule.  Each
is a part of a worker's start-up time (issue 21, item 9); this checks the modules, not the
time.

A real worker in a process of its own, on SQLite and PostgreSQL, runs a row (and, on Django
>= 6.0, a task) to its end; then the modules it loaded are read."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from test_django_processes import HERE, TIMEOUT, project

HAS_TASKS = importlib.util.find_spec("django.tasks") is not None
if HAS_TASKS:
    from tasks_conformance.test_conformance_worker import PROJECT, project_env
    from tasks_conformance.test_conformance_worker import manage as task_manage

__all__ = ["project", "project_env"]  # fixtures of the other test modules
pytestmark = pytest.mark.slow

NOT_LOADED = ("sqlalchemy.orm", "rich", "prometheus_client", "starlette", "uvicorn", "click",
              "jinja2", "grandalf", "numpy", "stator.dashboard", "stator.cli",
              "stator._store._dashboard", "stator._store._read_records", "stator._schedule",
              "cronsim")



def report(env: dict[str, str]) -> str:
    """After the run: the worker's modules, those of NOT_LOADED and the other database's
    SQLAlchemy dialect among them (stderr is a pipe)."""
    on_sqlite = "DJTEST_SQLITE" in env or "TASKPROJ_SQLITE" in env
    unwanted = (*NOT_LOADED, "sqlalchemy.dialects." + ("postgresql" if on_sqlite else "sqlite"))
    return (
        "import json, sys\n"
        f"unwanted = {unwanted!r}\n"
        "loaded = sorted(m for m in sys.modules"
        " if any(m == u or m.startswith(u + '.') for u in unwanted))\n"
        "print('LOADED=' + json.dumps(loaded))\n"
    )


def loaded_after(env: dict[str, str], setup: str, cwd: str) -> list[str]:
    code = (
        "import django\ndjango.setup()\n"
        "from django.core.management import call_command\n"
        f"{setup}\n"
        "call_command('runstator', '--until-idle', '--idle-window', '0')\n"
        f"{report(env)}"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert "stopped (idle): 1 rows processed" in done.stderr, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("LOADED="))
    found: list[str] = json.loads(line.removeprefix("LOADED="))
    return found


def test_a_model_worker_loads_no_orm_rich_nor_web_stack(project: dict[str, str]) -> None:
    """The test project has Django's admin (and Stator's) installed, as most projects do."""
    setup = ("from djtest.orders.models import Order\n"
             "Order.objects.create(paid=True)")
    assert loaded_after(project, setup, str(HERE)) == []


@pytest.mark.skipif(not HAS_TASKS, reason="the task backend needs Django >= 6.0")
def test_a_task_worker_loads_no_orm_rich_nor_web_stack(project_env: dict[str, str]) -> None:
    task_manage(project_env, "migrate", "-v", "0")
    env = {**project_env, "DJANGO_SETTINGS_MODULE": "settings"}
    setup = "from jobs import noop\nnoop.enqueue()"
    assert loaded_after(env, setup, str(PROJECT)) == []


def loaded_by_application(env: dict[str, str], work: str, cwd: str) -> list[str]:
    """The SQLAlchemy modules a process that loads its apps and does ``work`` imports."""
    code = (
        "import django\ndjango.setup()\n"
        f"{work}\n"
        "import json, sys\n"
        "print('LOADED=' + json.dumps(sorted(m for m in sys.modules"
        " if m == 'sqlalchemy' or m.startswith('sqlalchemy.'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=cwd)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("LOADED="))
    found: list[str] = json.loads(line.removeprefix("LOADED="))
    return found


def test_an_application_process_that_saves_rows_loads_no_sqlalchemy(
    project: dict[str, str],
) -> None:
    """A web process or a management command pays for what it uses: loading the apps, saving
    and reading a ``StatorModel`` row need no SQLAlchemy (about a quarter of a second to
    import on a slow machine, before every request of a freshly started process)."""
    work = ("from djtest.orders.models import Order\n"
            "order = Order.objects.create(paid=True)\n"
            "assert Order.objects.get(pk=order.pk).state == 'new'")
    assert loaded_by_application(project, work, str(HERE)) == []


@pytest.mark.skipif(not HAS_TASKS, reason="the task backend needs Django >= 6.0")
def test_an_application_process_that_enqueues_a_task_loads_no_sqlalchemy(
    project_env: dict[str, str],
) -> None:
    task_manage(project_env, "migrate", "-v", "0")
    env = {**project_env, "DJANGO_SETTINGS_MODULE": "settings"}
    work = ("from jobs import noop\nresult = noop.enqueue()\n"
            "assert noop.get_result(result.id).status == 'READY'")
    assert loaded_by_application(env, work, str(PROJECT)) == []


def test_the_runstator_command_loads_no_sqlalchemy_before_it_runs(
    project: dict[str, str],
) -> None:
    """``manage.py runstator`` loads the command's module before its ``handle``, which
    freezes what Django loaded (``gc.freeze``) so that the start-up's collections do not scan
    it; SQLAlchemy and the engine load after that, in ``handle``, not with the module."""
    work = ("from django.core.management import load_command_class\n"
            "load_command_class('stator.django', 'runstator')")
    assert loaded_by_application(project, work, str(HERE)) == []
