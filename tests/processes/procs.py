"""Helpers shared by every test that runs real ``stator`` processes (``tests/processes/`` and
``tests/faults/``): a test's database and processes (``ProcApp``), bounded waits, and the
end-of-test checks on rows, history and the side-effect ledger.

``proc_app`` and ``proc_db_url`` are fixtures; each conftest that wants them imports them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest
from sqlalchemy import func, insert, select, text

from . import app_fixture

# The console script without relying on PATH: the same interpreter as the tests.
STATOR = [sys.executable, "-c", "from stator.cli import main; main(prog_name='stator')"]
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
T = TypeVar("T")


@pytest.fixture
def proc_db_url(backend: str) -> str:
    """The URL of an empty database: the top-level ``backend`` fixture (a new SQLite file, or
    a new schema in the session's throwaway PostgreSQL database)."""
    return backend


@pytest.fixture
def proc_app(proc_db_url: str, tmp_path: Path) -> Iterator[ProcApp]:
    app = ProcApp(proc_db_url, tmp_path)
    try:
        yield app
    finally:
        app.close()


class Proc:
    """One ``stator`` process, its output going to files (no pipe can fill up and block it)."""

    def __init__(self, popen: subprocess.Popen[bytes], name: str, out: Path, err: Path) -> None:
        self.popen = popen
        self.name = name
        self.out = out
        self.err = err

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def send(self, signum: int) -> None:
        self.popen.send_signal(signum)

    def stderr(self) -> str:
        return ANSI.sub("", self.err.read_text(errors="replace")) if self.err.exists() else ""

    def describe(self) -> str:
        tail = "\n".join(self.stderr().splitlines()[-30:])
        return f"{self.name} (pid {self.pid}, exit code {self.popen.poll()}); stderr:\n{tail}"

    def wait(self, timeout: float) -> int:
        """The exit code, or a test failure if the process is still running after ``timeout``."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        pytest.fail(f"{self.name} still running after {timeout:g}s\n{self.describe()}")

    def reap(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()


class ProcApp:
    """The database and the ``stator`` processes of one test.

    ``app`` is the application module the workers import (``app_fixture`` unless a test
    brings its own); it must define ``stator``, a ``Job`` model and a ``Ledger`` model with
    ``row_id``, ``step`` and ``pid`` columns.  It is copied into ``directory`` and imported
    from there, as ``stator run module:stator`` finds a real application.
    """

    def __init__(self, url: str, directory: Path, app: ModuleType = app_fixture) -> None:
        self.url = url
        self.backend = "postgresql" if url.startswith("postgresql") else "sqlite"
        self.dir = directory
        self.trace = directory / "trace.log"
        self.kill_log = directory / "kills.log"  # processes that SIGKILLed themselves
        self.module = app.__name__.rpartition(".")[2]
        self.app_ref = f"{self.module}:stator"
        self.stator = app.stator.with_db(url)
        self.engine = self.stator.engine
        self.jobs = app.Job.__table__
        self.ledger_table = app.Ledger.__table__
        self.procs: list[Proc] = []
        assert app.__file__ is not None
        shutil.copy(Path(app.__file__), directory / f"{self.module}.py")

    # -- database ----------------------------------------------------------------------------

    def migrate(self) -> None:
        self.stator.migrate()
        self.ledger_table.create(self.engine, checkfirst=True)

    def insert(self, count: int, start: int = 1, **values: Any) -> None:
        rows = [{"id": i, **values} for i in range(start, start + count)]
        with self.engine.begin() as conn:
            for at in range(0, len(rows), 5000):
                conn.execute(insert(self.jobs), rows[at:at + 5000])

    def states(self) -> Counter[str]:
        jobs = self.jobs
        with self.engine.connect() as conn:
            return Counter(dict(conn.execute(  # type: ignore[arg-type]
                select(jobs.c.state, func.count()).group_by(jobs.c.state)
            ).all()))

    def done(self) -> int:
        return self.states()["done"]

    def rows(self) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(select(self.jobs).order_by(self.jobs.c.id)))

    def ledger(self) -> list[tuple[int, str, int]]:
        ledger = self.ledger_table
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(  # type: ignore[misc]
                select(ledger.c.row_id, ledger.c.step, ledger.c.pid).order_by(ledger.c.id)
            )]

    def ledger_count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(
                select(func.count()).select_from(self.ledger_table)
            ).scalar_one())

    def traced(self) -> list[tuple[int, str, int]]:
        """(row id, step, pid) of every handler that has started, from the trace file."""
        if not self.trace.exists():
            return []
        found = []
        for line in self.trace.read_text().split("\n")[:-1]:  # not a line still being written
            row_id, step, pid = line.split()
            found.append((int(row_id), step, int(pid)))
        return found

    def self_kills(self) -> dict[int, str]:
        """pid -> the moment (``before-commit``, ``after-commit``) of each process that
        SIGKILLed itself (``STATOR_PROC_DIE_AFTER``)."""
        if not self.kill_log.exists():
            return {}
        found = {}
        for line in self.kill_log.read_text().split("\n")[:-1]:
            pid, moment, _nth = line.split()
            found[int(pid)] = moment
        return found

    def started(self) -> list[tuple[int, str]]:
        """(row id, step) of every handler that has started."""
        return [(row_id, step) for row_id, step, _pid in self.traced()]

    # -- processes ---------------------------------------------------------------------------

    def env(self, sleep: float = 0.0, timeout: float = 10.0, **extra: str) -> dict[str, str]:
        """The environment of a ``stator`` process; ``extra`` adds ``STATOR_PROC_<NAME>``
        variables read by the application module (e.g. ``CLOCK_OFFSET``)."""
        env = dict(os.environ)
        env.update(
            STATOR_PROC_DB=self.url, STATOR_PROC_SLEEP=str(sleep),
            STATOR_PROC_TIMEOUT=str(timeout), STATOR_PROC_TRACE=str(self.trace),
            STATOR_PROC_KILL_LOG=str(self.kill_log),
            PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", COLUMNS="200", NO_COLOR="1",
        )
        env.update({f"STATOR_PROC_{name.upper()}": value for name, value in extra.items()})
        return env

    def spawn(
        self, *args: str, sleep: float = 0.0, timeout: float = 10.0, **extra: str
    ) -> Proc:
        """Start ``stator run <app>:stator ARGS`` in the background."""
        name = f"worker-{len(self.procs) + 1}"
        out, err = self.dir / f"{name}.out", self.dir / f"{name}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            popen = subprocess.Popen(
                [*STATOR, "run", self.app_ref, *args], cwd=self.dir,
                env=self.env(sleep, timeout, **extra),
                stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
            )
        proc = Proc(popen, name, out, err)
        self.procs.append(proc)
        return proc

    def cli(
        self, *args: str, timeout: float = 60.0, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a ``stator`` command to completion; stdout and stderr (without colour codes)."""
        try:
            done = subprocess.run(
                [*STATOR, *args], cwd=self.dir, env=env or self.env(), stdin=subprocess.DEVNULL,
                capture_output=True, text=True, timeout=timeout, check=False,
            )
        except subprocess.TimeoutExpired:
            done = None
        if done is None:
            pytest.fail(f"`stator {' '.join(args)}` did not finish within {timeout:g}s")
        done.stdout, done.stderr = ANSI.sub("", done.stdout), ANSI.sub("", done.stderr)
        return done

    def describe(self) -> str:
        return "\n".join(p.describe() for p in self.procs)

    def close(self) -> None:
        for proc in self.procs:
            proc.reap()
        self.stator.dispose()


def wait_until(
    predicate: Callable[[], T], what: str, *, timeout: float = 60.0,
    watch: Iterable[Proc] = (), app: ProcApp | None = None,
) -> T:
    """Poll ``predicate`` every 0.1 s until it is truthy; fail after ``timeout`` seconds, or
    at once if one of the ``watch`` processes (which should keep running) has exited."""
    watch = list(watch)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        for proc in watch:
            if not proc.alive():
                pytest.fail(f"{proc.name} exited while waiting for {what}\n{proc.describe()}")
        if time.monotonic() >= deadline:
            details = f"\n{app.describe()}" if app is not None else ""
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}{details}")
        time.sleep(0.1)


def applied_twice(app: ProcApp) -> list[tuple[int, str]]:
    """(row, step) pairs whose transition was committed more than once (the ledger holds one
    row per committed transition)."""
    pairs = Counter((row_id, step) for row_id, step, _pid in app.ledger())
    return sorted(pair for pair, n in pairs.items() if n > 1)


def assert_exactly_once(
    app: ProcApp, rows: int, steps: Callable[[int], Sequence[str]] | None = None,
    history: Sequence[str] = ("b", "c", "done"),
) -> None:
    """Every row went a -> b -> c -> done and each of its steps (``steps(row_id)``, by default
    a, b and c) was committed exactly once: the side-effect ledger has each (row, step) once,
    and each row's ``state_history`` lists each transition once, in order."""
    steps_of = steps or (lambda _row_id: app_fixture.STEPS)
    entries = app.ledger()
    pairs = Counter((row_id, step) for row_id, step, _pid in entries)
    twice = sorted(pair for pair, n in pairs.items() if n > 1)
    assert not twice, f"steps committed more than once: {twice[:20]}"
    expected = {(i, step) for i in range(1, rows + 1) for step in steps_of(i)}
    missing = sorted(expected - set(pairs))
    assert not missing, f"steps never committed: {missing[:20]}"
    assert len(entries) == len(expected)
    for row in app.rows():
        assert row.state == "done"
        assert row.state_next is None
        listed = row.state_history or []
        assert [entry[0] for entry in listed] == list(history), (row.id, listed)
        times = [datetime.fromisoformat(entry[1]) for entry in listed]
        assert times == sorted(times), (row.id, listed)


def error_count(app: ProcApp) -> int:
    with app.engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM stator_errors")).scalar_one())


def worker_pids(app: ProcApp) -> list[int]:
    with app.engine.connect() as conn:
        return [int(pid) for pid in conn.execute(text("SELECT pid FROM stator_workers")).scalars()]


def lost_writes(app: ProcApp, pid: int | None = None) -> int:
    """Writes refused by the fence, as counted in ``stator_stats`` (by one process, or all)."""
    where, params = "", {}
    if pid is not None:
        where, params = " WHERE worker_id LIKE :w", {"w": f"{pid}-%"}
    with app.engine.connect() as conn:
        return int(conn.execute(
            text(f"SELECT coalesce(sum(lost), 0) FROM stator_stats{where}"), params
        ).scalar_one())
