"""Hung handlers under ``manage.py runstator``: a Django connection belongs to its thread, so
a handler hung past its deadline keeps its connection until it returns; the worker replaces
at most ``--max-hung`` (``STATOR['MAX_HUNG']``, default: the concurrency) of them and, at
one more, drains and exits 75.  PostgreSQL connections stay within CONCURRENCY + 3 +
MAX_HUNG however many handlers hang, and each is closed once its handler returns.

In-process (``call_command``), fast; the handlers wait on an event the test sets at the end.
The same with ``django.tasks`` tasks in a real ``runstator`` process is in
``test_hung_tasks_process`` below (slow)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connections
from django.test.utils import override_settings
from djtest.orders.models import Job, JobStates
from test_runstator_flags import runstator

from stator._worker.serving import EXIT_HUNG

PATIENCE = 30.0
CONCURRENCY = 2
MAX_HUNG = 1
FIXED_CONNECTIONS = 3  # the coordinator's, the writer's, the LISTEN connection
release = threading.Event()


def hang(job: Any) -> Any:
    """A handler that used its connection, then hangs (on a call that never answers, say)."""
    Job.objects.using(job._state.db).filter(pk=job.pk).exists()
    release.wait(PATIENCE)
    return JobStates.done


@contextmanager
def connections_seen(name: str) -> Iterator[list[int]]:
    """Counts of the connections to database ``name`` (besides the counter's own), taken
    every 10 ms on a thread of its own for as long as the block runs."""
    seen: list[int] = []
    stop = threading.Event()
    ready = threading.Event()

    def count() -> None:
        with psycopg.connect(host="127.0.0.1", user="postgres", dbname=name,
                             autocommit=True) as watcher:
            while not stop.is_set():
                row = watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                      "%s AND pid <> pg_backend_pid()", [name]).fetchone()
                seen.append(int(row[0]) if row else 0)
                ready.set()
                stop.wait(0.01)

    counter = threading.Thread(target=count, daemon=True)
    counter.start()
    try:
        assert ready.wait(PATIENCE), "the connection counter never started"
        yield seen
    finally:
        stop.set()
        counter.join(PATIENCE)


def wait_for_count(seen: list[int], wanted: int) -> None:
    deadline = time.monotonic() + PATIENCE
    while seen[-1] > wanted and time.monotonic() < deadline:
        time.sleep(0.05)  # closing is asynchronous on the server's side


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
def test_hung_handlers_keep_connections_within_the_bound_and_runstator_exits_75(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(JobStates.states["waiting"], "handler", hang)
    monkeypatch.setattr(JobStates.states["waiting"], "timeout", 0.3)
    Job.objects.using("pg").bulk_create([Job(kind="hang") for _ in range(12)])
    release.clear()
    settings = {"CONCURRENCY": CONCURRENCY, "DATABASE": "pg", "MAX_HUNG": MAX_HUNG}
    with connections_seen(connections["pg"].settings_dict["NAME"]) as seen:
        baseline = seen[-1]  # this thread's own connection
        try:
            with override_settings(STATOR=settings), pytest.raises(SystemExit) as exited:
                runstator("orders.Job", "--run-for", "20")  # without the cap: exit 0 at 20 s
            while_running = list(seen)
        finally:
            release.set()  # the hung handlers return; each thread closes its connection
        wait_for_count(seen, baseline)
        assert seen[-1] <= baseline  # every hung thread's connection closed once it returned
    assert exited.value.code == EXIT_HUNG
    most = max(while_running) - baseline
    assert CONCURRENCY + 1 <= most <= CONCURRENCY + FIXED_CONNECTIONS + MAX_HUNG
    err = capsys.readouterr().err
    assert f"more than {MAX_HUNG} handler threads hung" in err and "exit 75" in err
    attempts = list(Job.objects.using("pg").values_list("state_attempts", flat=True))
    assert sorted(set(attempts)) == [0, 1]  # hung rows: a timeout each; the rest handed back


@pytest.mark.parametrize("value", [-1, 257, "2", True])
def test_a_bad_max_hung_setting_is_one_error_line(
    capsys: pytest.CaptureFixture[str], value: Any
) -> None:
    with override_settings(STATOR={"MAX_HUNG": value}), pytest.raises(SystemExit) as exited:
        runstator("--until-idle")
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: settings.STATOR['MAX_HUNG'] must be a whole number from 0")


@pytest.mark.parametrize("value", ["-1", "257"])
def test_max_hung_out_of_range_is_one_error_line(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        runstator("--max-hung", value, "--until-idle")
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("error: --max-hung must be 0 to 256")


# -- the same with django.tasks, in a real runstator process ---------------------------------

HAS_TASKS = importlib.util.find_spec("django.tasks") is not None
TASKPROJ = Path(__file__).with_name("taskproj")
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.slow
@pytest.mark.skipif(not HAS_TASKS, reason="the task backend needs Django >= 6.0")
def test_hung_tasks_process(tmp_path: Path) -> None:
    """Six tasks hang past their ``timeout`` under ``runstator -c 2`` (the issue's case):
    the process exits 75 and its PostgreSQL connections never exceed CONCURRENCY + 3 +
    MAX_HUNG (2 + 3 + 2, the default MAX_HUNG being the concurrency)."""
    from test_tasks_shop import throwaway_pg_database

    release_file = tmp_path / "release"
    with throwaway_pg_database() as url:
        env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{TASKPROJ}",
               "TASKPROJ_PG": url, "TASKPROJ_TIMEOUT": "0.5", "TASKPROJ_CONCURRENCY": "2"}
        manage = [sys.executable, str(TASKPROJ / "manage.py")]
        subprocess.run([*manage, "migrate", "-v", "0"], env=env, check=True, timeout=120)
        enqueue = ("from jobs import hang_until\n"
                   f"print([hang_until.enqueue({str(release_file)!r}).id for _ in range(6)])")
        subprocess.run([*manage, "shell", "-c", enqueue], env=env, check=True, timeout=120,
                       capture_output=True)
        with connections_seen(url.rsplit("/", 1)[-1]) as seen:
            try:
                worker = subprocess.run([*manage, "runstator", "--run-for", "30"], env=env,
                                        timeout=120, capture_output=True, text=True)
            finally:
                release_file.touch()
        assert worker.returncode == EXIT_HUNG, worker.stderr
        assert max(seen) <= 2 + FIXED_CONNECTIONS + 2, json.dumps(seen)
        errors = [x for x in worker.stderr.splitlines() if x.startswith("error:")]
        assert len(errors) == 1 and "exit 75" in errors[0]
