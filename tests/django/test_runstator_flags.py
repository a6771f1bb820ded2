"""``manage.py runstator``'s flags, one by one: model labels and ``-x``, ``-c`` and
``--batch-size`` (and their bounds), ``-r``, ``--queue``, ``-v``, SIGTERM with a handler in
flight; and, beside them, ``transition_perform_queryset`` and the tasks backend's
``OPTIONS["keep_results"]``.

``call_command`` in the test process where a process adds nothing; real ``manage.py``
processes (the fixtures and helpers of the other process tests) where exit codes, signals
or the settings a process starts with matter.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from djtest.orders.models import Job, Note, NoteStates, Order, OrderStates
from test_django_processes import TIMEOUT, _start, manage, project, shell

from stator._store._django import DjangoStore

HAS_TASKS = importlib.util.find_spec("django.tasks") is not None
if HAS_TASKS:  # the fixtures of the task tests (Django >= 6.0 only)
    from tasks_conformance.test_conformance_worker import manage as task_manage
    from tasks_conformance.test_conformance_worker import project_env
    from tasks_conformance.test_conformance_worker import shell as task_shell
    from test_tasks import tasks

__all__ = ["project", "project_env", "tasks"]  # fixtures of the other test modules
needs_tasks = pytest.mark.skipif(not HAS_TASKS, reason="the task backend needs Django >= 6.0")


def runstator(*args: str) -> None:
    """``manage.py runstator ARGS`` in this process (it lowers Django's log level: restored)."""
    django_log = logging.getLogger("django")
    level = django_log.level
    try:
        call_command("runstator", *args)
    finally:
        django_log.setLevel(level)


def states(model: type) -> dict[Any, str]:
    return dict(model.objects.values_list("pk", "state"))  # type: ignore[attr-defined]


@pytest.mark.django_db(transaction=True)
def test_call_command_leaves_the_collector_alone() -> None:
    """``manage.py runstator`` sets its start-up objects aside from the collector
    (``gc.freeze``); under ``call_command`` the process is a test suite's and lives on, and
    what it froze would never be collected once it became garbage."""
    order = Order.objects.create(paid=True)
    before = gc.get_freeze_count()
    runstator("orders.Order", "--until-idle")
    assert states(Order) == {order.pk: "charged"}
    assert gc.get_freeze_count() == before


# -- which models: labels and -x -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_labels_select_the_models_to_run() -> None:
    """``app_label.Model`` (any case), a table name and an app label each pick their models;
    the others are left alone."""
    order = Order.objects.create(paid=True)
    job = Job.objects.create()
    note = Note.objects.create()
    runstator("orders.ORDER", "--until-idle")
    assert states(Order) == {order.pk: "charged"}
    assert states(Job) == {job.pk: "waiting"} and states(Note) == {note.pk: "draft"}
    runstator("orders_job", "--until-idle")  # the table name
    assert states(Job) == {job.pk: "done"} and states(Note) == {note.pk: "draft"}
    runstator("orders", "--until-idle")  # the whole app
    assert states(Note) == {note.pk: "sent"}


@pytest.mark.django_db(transaction=True)
def test_exclude_leaves_those_models_alone() -> None:
    order = Order.objects.create(paid=True)
    job = Job.objects.create()
    note = Note.objects.create()
    runstator("-x", "orders.Job", "--exclude", "orders_note", "--until-idle")
    assert states(Order) == {order.pk: "charged"}
    assert states(Job) == {job.pk: "waiting"} and states(Note) == {note.pk: "draft"}
    runstator("orders", "-x", "orders.note", "--until-idle")  # labels, then less
    assert states(Job) == {job.pk: "done"} and states(Note) == {note.pk: "draft"}


# -- how much at once: -c and --batch-size ------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrency_is_how_many_handlers_run_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``-c 3`` (the settings say 2): three handlers meet at a barrier, never four at once."""
    meet = threading.Barrier(3, timeout=15)
    lock = threading.Lock()
    running = [0, 0]  # now, most

    def check_draft(note: Any) -> Any:
        with lock:
            running[0] += 1
            running[1] = max(running)
        try:
            meet.wait()  # broken (an error) unless three run at once
        finally:
            with lock:
                running[0] -= 1
        return NoteStates.sent

    monkeypatch.setattr(NoteStates.states["draft"], "handler", check_draft)
    Note.objects.bulk_create([Note() for _ in range(6)])
    runstator("orders.Note", "-c", "3", "--until-idle")
    assert set(states(Note).values()) == {"sent"}
    assert running[1] == 3


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("batch", [1, 4])
def test_batch_size_is_the_most_rows_one_claim_takes(
    monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    """Never more rows in one claim than the batch allows (with the default, 100, a worker
    whose fast handlers are timed takes the eight or nine rows left in one claim)."""
    claimed: list[int] = []
    claim = DjangoStore.claim

    def counting_claim(self: DjangoStore, *args: Any, **kwargs: Any) -> Any:
        rows = claim(self, *args, **kwargs)
        claimed.append(len(rows))
        return rows

    monkeypatch.setattr(DjangoStore, "claim", counting_claim)
    Note.objects.bulk_create([Note() for _ in range(10)])
    runstator("orders.Note", "-c", "1", "--batch-size", str(batch), "--until-idle")
    assert set(states(Note).values()) == {"sent"}
    assert sum(claimed) == 10 and max(claimed) <= batch


@pytest.mark.parametrize(("args", "message"), [
    (["-c", "0"], "--concurrency must be at least 1"),
    (["--concurrency", "-2"], "--concurrency must be at least 1"),
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["-r", "0"], "--run-for must be > 0 seconds"),
    (["--max-tasks", "0"], "--max-tasks must be at least 1"),
    (["--max-tasks", "-1"], "--max-tasks must be at least 1"),
    (["--worker-id", ""], "--worker-id must be 1 to 64 printable characters"),
    (["--worker-id", "w" * 65], "--worker-id must be 1 to 64 printable characters"),
])
def test_values_below_one_are_one_error_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    """Refused before the database is touched (no database here): exit 2, one line."""
    with pytest.raises(SystemExit) as exited:
        runstator(*args, "--until-idle")
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and len(err.strip().splitlines()) == 1


# -- --queue (Django >= 6.0) ----------------------------------------------------------------------


@needs_tasks
@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("alias", ["default", "pg"])
def test_queue_runs_only_that_queues_tasks(alias: str, tasks: str) -> None:
    import tasks_jobs
    from django.tasks import TaskResultStatus

    default = tasks_jobs.add.enqueue(1, 1)
    mail = tasks_jobs.shout.enqueue("hi")
    runstator("--queue", "mail", "--until-idle")
    assert tasks_jobs.shout.get_result(mail.id).return_value == "HI"
    assert tasks_jobs.add.get_result(default.id).status == TaskResultStatus.READY
    runstator("--until-idle")  # no --queue: every configured queue
    assert tasks_jobs.add.get_result(default.id).return_value == 2


@needs_tasks
@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("alias", ["pg"])
def test_until_idle_leaves_a_task_another_session_holds_locked(
    alias: str, tasks: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A due task locked by the application (``SELECT … FOR UPDATE`` in another session) is
    not the worker's to wait for: ``--until-idle`` runs the rest and exits."""
    import psycopg
    import tasks_jobs
    from django.db import connections
    from django.tasks import TaskResultStatus

    locked = tasks_jobs.add.enqueue(1, 1)
    free = tasks_jobs.add.enqueue(2, 2)
    summaries = summaries_of(monkeypatch)
    db = connections[alias].settings_dict
    with psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"],
                         dbname=db["NAME"]) as other:
        other.execute("SELECT 1 FROM stator_tasks WHERE id = %s FOR UPDATE", [locked.id])
        runstator("--until-idle", "--idle-window", "0.2", "-r", "60")
        other.rollback()
    assert summaries[0].reason == "idle"  # not "run-for elapsed"
    assert tasks_jobs.add.get_result(free.id).return_value == 4
    assert tasks_jobs.add.get_result(locked.id).status == TaskResultStatus.READY


# -- what people migrating from db_worker look for ----------------------------------------------


def summaries_of(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The RunSummary of each worker ``runstator`` serves from now on."""
    from stator._worker import serving

    found: list[Any] = []
    serve = serving.serve

    def recording(*args: Any, **kwargs: Any) -> Any:
        found.append(serve(*args, **kwargs))
        return found[-1]

    monkeypatch.setattr(serving, "serve", recording)
    return found


@pytest.mark.django_db(transaction=True)
def test_max_tasks_exits_0_after_that_many(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``--until-idle``: the worker ends by itself once three rows were handled."""
    summaries = summaries_of(monkeypatch)
    Note.objects.bulk_create([Note() for _ in range(5)])
    runstator("orders.Note", "--max-tasks", "3", "-c", "2", "-r", "60")
    assert summaries[0].reason == "max-tasks reached" and summaries[0].processed == 3
    assert sorted(states(Note).values()) == ["draft", "draft", "sent", "sent", "sent"]


@pytest.mark.django_db(transaction=True)
def test_worker_id_names_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The name its failures are recorded under (and its heartbeat row's)."""
    from stator.django.models import StatorError

    def check_draft(note: Any) -> Any:
        raise RuntimeError("recorded under the worker's name")

    monkeypatch.setattr(NoteStates.states["draft"], "handler", check_draft)
    StatorError.objects.all().delete()  # Stator's own tables outlive Django's flush
    Note.objects.create()
    runstator("orders.Note", "--worker-id", "box-7", "--until-idle")
    assert list(StatorError.objects.values_list("worker_id", flat=True)) == ["box-7"]


@pytest.mark.django_db(transaction=True)
def test_start_up_objects_are_set_aside_from_the_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``gc.freeze()`` before the worker runs: the modules and objects of start-up are not
    scanned by each full collection, nor at exit (over a second, on a busy machine).  As
    ``manage.py runstator`` runs it: Django's ``run_from_argv`` marks the command (under a
    plain ``call_command`` nothing is frozen, see the test above)."""
    import gc

    from stator.django.management.commands.runstator import Command

    monkeypatch.setattr(Command, "_called_from_command_line", True)
    frozen: list[int] = []
    monkeypatch.setattr(NoteStates.states["draft"], "handler", lambda note: frozen.append(
        gc.get_freeze_count()) or NoteStates.sent)
    gc.unfreeze()
    Note.objects.create()
    try:
        runstator("orders.Note", "--until-idle")
    finally:
        gc.unfreeze()
    assert frozen and frozen[0] > 1000


@needs_tasks
@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("alias", ["default", "pg"])
def test_exclude_queue_leaves_those_queues_tasks(alias: str, tasks: str) -> None:
    import tasks_jobs
    from django.tasks import TaskResultStatus

    default = tasks_jobs.add.enqueue(1, 1)
    mail = tasks_jobs.shout.enqueue("hi")
    runstator("--exclude-queue", "mail", "--exclude-queue", "other", "--until-idle")
    assert tasks_jobs.add.get_result(default.id).return_value == 2
    assert tasks_jobs.shout.get_result(mail.id).status == TaskResultStatus.READY


@needs_tasks
@pytest.mark.django_db(transaction=True)
def test_backend_runs_only_that_backends_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    import tasks_jobs
    from django.tasks import TaskResultStatus
    from django.test import override_settings

    backend = {"BACKEND": "stator.django.tasks.StatorBackend", "QUEUES": ["default", "mail"]}
    with override_settings(TASKS={"default": backend, "other": backend,
                                  "plain": {"BACKEND": "django.tasks.backends.dummy."
                                                       "DummyBackend"}}):
        mine = tasks_jobs.add.using(backend="other").enqueue(1, 2)
        theirs = tasks_jobs.add.enqueue(3, 4)
        runstator("--backend", "other", "--until-idle")
        assert tasks_jobs.add.using(backend="other").get_result(mine.id).return_value == 3
        assert tasks_jobs.add.get_result(theirs.id).status == TaskResultStatus.READY
        capsys.readouterr()
        for alias in ("plain", "nowhere"):
            with pytest.raises(SystemExit) as exited:
                runstator("--backend", alias, "--until-idle")
            assert exited.value.code == 2
            err = capsys.readouterr().err
            assert err.startswith(f"error: --backend '{alias}' is not a Stator task backend")
            assert "(configured: default, other)" in err and len(err.strip().splitlines()) == 1


@needs_tasks
@pytest.mark.slow
@pytest.mark.parametrize("project_env", ["sqlite"], indirect=True)
@pytest.mark.parametrize("debug", ["0", "1"])
def test_djangos_task_lines_from_v2_each_once(project_env: dict[str, str], debug: str) -> None:
    """Django's ``django.tasks`` lines (id, path, state), as ``db_worker`` shows them: from
    ``-v 2`` on, each once, with ``DEBUG`` on (Django's console handler) or off; at ``-v 1``
    only the FAILED one."""
    env = {**project_env, "TASKPROJ_DEBUG": debug}
    task_manage(env, "migrate", "-v", "0")
    ids = task_shell(env, "from jobs import noop, refuse\n"
                          "out = [noop.enqueue().id, refuse.enqueue('no').id]")
    assert isinstance(ids, list)
    ok, failed = ids
    run = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("taskproj") / "manage.py"), "runstator",
         "--until-idle", "-v", "2"], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    for task_id, path, final in ((ok, "jobs.noop", "SUCCESSFUL"),
                                 (failed, "jobs.refuse", "FAILED")):
        for state in ("RUNNING", final):
            line = f"Task id={task_id} path={path} state={state}"
            assert sum(line in x for x in lines) == 1, (line, run.stderr)
    again = task_shell(env, "from jobs import refuse\nout = refuse.enqueue('no').id")
    quiet = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("taskproj") / "manage.py"), "runstator",
         "--until-idle"], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert quiet.returncode == 0, quiet.stderr
    assert "state=RUNNING" not in quiet.stderr
    assert quiet.stderr.count(f"Task id={again} path=jobs.refuse state=FAILED") == 1


VERSIONED = "from django.tasks import task\n\n\n@task\ndef version() -> int:\n    return {}\n"


@needs_tasks
@pytest.mark.slow
@pytest.mark.parametrize("project_env", ["sqlite"], indirect=True)
def test_reload_restarts_the_worker_when_code_changes(
    project_env: dict[str, str], tmp_path: Path
) -> None:
    """``--reload`` (Django's autoreloader, as ``runserver``): a task's module changes, the
    worker restarts, and the next task runs the new code."""
    project = tmp_path / "proj"
    project.mkdir()
    source = Path(__file__).with_name("taskproj")
    for name in ("manage.py", "settings.py"):
        (project / name).write_text((source / name).read_text())
    jobs = project / "jobs.py"
    jobs.write_text(VERSIONED.format(1))
    env = {**project_env, "PYTHONPATH": project_env["PYTHONPATH"].replace(str(source),
                                                                          str(project))}
    def in_copy(code: str) -> object:
        done = subprocess.run([sys.executable, str(project / "manage.py"), "shell", "-c",
                               f"import json\n{code}\nprint(json.dumps(out))"],
                              env=env, capture_output=True, text=True, timeout=TIMEOUT)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    in_copy("from django.core.management import call_command\n"
            "out = call_command('migrate', verbosity=0)")
    enqueue = "from jobs import version\nout = version.enqueue().id"
    result = ("from jobs import version\n"
              "r = version.get_backend().get_result({!r})\n"
              "out = r.return_value if r.is_finished else None")
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen([sys.executable, str(project / "manage.py"), "runstator",
                               "--reload"], env=env, stdout=log, stderr=log,
                              start_new_session=True)
    try:
        first = in_copy(enqueue)
        wait_for(lambda: in_copy(result.format(first)) == 1, "the first task")
        jobs.write_text(VERSIONED.format(2))
        # The reloader only notices a change to a file it had already seen; it may first look
        # at jobs.py (imported by the first task) after this write.  So each check moves the
        # file's time on again: once the reloader has seen it, the next move is a change.
        stamp = [time.time() + 5]

        def restarted() -> bool:
            stamp[0] += 1
            os.utime(jobs, (stamp[0], stamp[0]))
            return (tmp_path / "worker.log").read_text().count("INFO stator: worker ") >= 3

        wait_for(restarted, "the worker to restart")  # started, stopped, started again
        second = in_copy(enqueue)
        wait_for(lambda: in_copy(result.format(second)) == 2, "the new code to run")
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        log.close()
    text = (tmp_path / "worker.log").read_text()
    assert "stopped (code changed or stopped (--reload))" in text, text


def wait_for(condition: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


# -- in real processes: -r, -v, SIGTERM ----------------------------------------------------------


@pytest.mark.slow
def test_run_for_works_then_exits_0(project: dict[str, str]) -> None:
    shell(project, "from djtest.orders.models import Order\n"
                   "result = Order.objects.create(paid=True).pk")
    run = manage(project, "runstator", "-r", "1.5", check=False)
    assert run.returncode == 0, run.stderr
    assert "stopped (run-for elapsed)" in run.stderr
    assert shell(project, "from djtest.orders.models import Order\n"
                          "result = [o.state for o in Order.objects.all()]") == ["charged"]


FAILING_JOB = "from djtest.orders.models import Job\nresult = Job.objects.create(kind='fail').pk"


@pytest.mark.slow
def test_verbosity_0_warnings_only_2_debug(project: dict[str, str]) -> None:
    """A failing handler: ``-v 0`` shows its warning and nothing below; ``-v 2`` adds the
    worker's INFO lines and the failure's DEBUG line."""
    shell(project, FAILING_JOB)
    quiet = manage(project, "runstator", "--until-idle", "-v", "0").stderr
    assert " WARNING stator" in quiet and "failed (attempt 1)" in quiet
    assert " INFO " not in quiet and " DEBUG " not in quiet
    shell(project, FAILING_JOB)
    loud = manage(project, "runstator", "--until-idle", "-v", "2").stderr
    assert " INFO stator" in loud and "stopped (idle)" in loud
    assert " DEBUG stator.worker.failures: orders_job" in loud, loud


@pytest.mark.slow
def test_sigterm_lets_the_running_handler_finish_and_write(
    project: dict[str, str], tmp_path: Path
) -> None:
    """SIGTERM while a handler runs (the ``slow`` job, 20 s): the worker waits for it, writes
    its transition and exits 0."""
    shell(project, "from djtest.orders.models import Job\n"
                   "result = Job.objects.create(kind='slow').pk")
    mark = tmp_path / "running"
    proc, _ = _start({**project, "DJTEST_SLOW_MARK": str(mark)}, tmp_path)
    deadline = time.monotonic() + TIMEOUT
    while not mark.exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=TIMEOUT)[0]
    assert proc.returncode == 0, output
    assert "stopped (signal SIGTERM)" in output
    assert shell(project, "from djtest.orders.models import Job\n"
                          "result = [[j.state, j.state_attempts] for j in Job.objects.all()]"
                 ) == [["done", 0]]


# -- StatorModel.transition_perform_queryset (Takahē's spelling) --------------------------------


@pytest.mark.django_db
def test_transition_perform_queryset_moves_only_rows_with_an_edge() -> None:
    new, charged, other = (Order.objects.create(note=n) for n in ("a", "b", "c"))
    Order.objects.filter(pk=charged.pk).transition_perform(OrderStates.charged)
    moved = Order.transition_perform_queryset(
        Order.objects.filter(note__in=["a", "b"]), OrderStates.shipped
    )
    assert moved == 1  # new has no edge to shipped
    assert states(Order) == {new.pk: "new", charged.pk: "shipped", other.pk: "new"}
    assert Order.transition_perform_queryset(Order.objects.filter(pk=new.pk), "charged") == 1
    assert states(Order)[new.pk] == "charged"


# -- the tasks backend's OPTIONS["keep_results"] --------------------------------------------------

WEEK = 7 * 24 * 3600.0
ENQUEUE = "from jobs import noop\nout = [noop.using(backend=b).enqueue().id for b in {!r}]"
KEPT = """
from stator.django.models import StatorTask
out = {r.backend: [r.state, r.state_next and (r.state_next - r.state_changed).total_seconds()]
       for r in StatorTask.objects.all()}
"""


@needs_tasks
@pytest.mark.slow
@pytest.mark.parametrize("project_env", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("options", "kept"), [
    ({"default": {"keep_results": 300}}, {"default": 300.0}),
    ({"default": {"keep_results": None}}, {"default": None}),  # for ever
    # One graph for every Stator backend: the most lenient value wins, and a backend that
    # sets nothing counts with the default (its results are not cut to another's 300 s).
    ({"default": {"keep_results": 300}, "other": {}}, {"default": WEEK, "other": WEEK}),
])
def test_keep_results_sets_when_a_finished_task_is_deleted(
    project_env: dict[str, str], tmp_path: Path, options: dict[str, Any],
    kept: dict[str, float | None],
) -> None:
    (tmp_path / "keep_settings.py").write_text(
        "from settings import *  # noqa: F403\n"
        f"TASKS = {{name: {{'BACKEND': 'stator.django.tasks.StatorBackend', 'OPTIONS': o}}\n"
        f"         for name, o in {options!r}.items()}}\n"
    )
    env = {**project_env, "DJANGO_SETTINGS_MODULE": "keep_settings",
           "PYTHONPATH": f"{project_env['PYTHONPATH']}{os.pathsep}{tmp_path}"}
    task_manage(env, "migrate", "-v", "0")
    task_shell(env, ENQUEUE.format(sorted(options)))
    task_manage(env, "runstator", "--until-idle")
    assert task_shell(env, KEPT) == {
        backend: ["successful", seconds] for backend, seconds in kept.items()
    }
