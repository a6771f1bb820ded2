"""Fixtures for tests that run real ``stator run`` worker processes.

Each test gets ``proc_app``: an empty database (a SQLite file in ``tmp_path``, or a fresh
schema in a throwaway PostgreSQL database made for this test session), a copy of
``app_fixture.py`` in ``tmp_path`` for the workers to import, and helpers to start workers,
run other ``stator`` commands and look at the database.  Every process a test starts is
killed and reaped when the test ends, whatever its outcome.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select

from . import app_fixture

APP = "app_fixture:stator"
# The console script without relying on PATH: the same interpreter as the tests.
STATOR = [sys.executable, "-c", "from stator._cli import main; main(prog_name='stator')"]
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

jobs = app_fixture.Job.__table__
ledger = app_fixture.Ledger.__table__


@pytest.fixture
def proc_db_url(backend: str) -> str:
    """The URL of an empty database: the top-level ``backend`` fixture (a new SQLite file, or
    a new schema in the session's throwaway PostgreSQL database)."""
    return backend


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
    """The database and the ``stator`` processes of one test."""

    def __init__(self, url: str, directory: Path) -> None:
        self.url = url
        self.backend = "postgresql" if url.startswith("postgresql") else "sqlite"
        self.dir = directory
        self.trace = directory / "trace.log"
        self.stator = app_fixture.stator.with_db(url)
        self.engine = self.stator.engine
        self.procs: list[Proc] = []
        shutil.copy(Path(app_fixture.__file__), directory / "app_fixture.py")

    # -- database ----------------------------------------------------------------------------

    def migrate(self) -> None:
        self.stator.migrate()
        ledger.create(self.engine, checkfirst=True)

    def insert(self, count: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(insert(jobs), [{"id": i} for i in range(1, count + 1)])

    def states(self) -> Counter[str]:
        with self.engine.connect() as conn:
            return Counter(dict(conn.execute(
                select(jobs.c.state, func.count()).group_by(jobs.c.state)
            ).all()))

    def done(self) -> int:
        return self.states()["done"]

    def rows(self) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(select(jobs).order_by(jobs.c.id)))

    def ledger(self) -> list[tuple[int, str, int]]:
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(  # type: ignore[misc]
                select(ledger.c.row_id, ledger.c.step, ledger.c.pid).order_by(ledger.c.id)
            )]

    def ledger_count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(ledger)).scalar_one())

    def traced(self) -> list[tuple[int, str, int]]:
        """(row id, step, pid) of every handler that has started, from the trace file."""
        if not self.trace.exists():
            return []
        found = []
        for line in self.trace.read_text().split("\n")[:-1]:  # not a line still being written
            row_id, step, pid = line.split()
            found.append((int(row_id), step, int(pid)))
        return found

    def started(self) -> list[tuple[int, str]]:
        """(row id, step) of every handler that has started."""
        return [(row_id, step) for row_id, step, _pid in self.traced()]

    # -- processes ---------------------------------------------------------------------------

    def env(self, sleep: float = 0.0, timeout: float = 10.0) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            STATOR_PROC_DB=self.url, STATOR_PROC_SLEEP=str(sleep),
            STATOR_PROC_TIMEOUT=str(timeout), STATOR_PROC_TRACE=str(self.trace),
            PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", COLUMNS="200", NO_COLOR="1",
        )
        return env

    def spawn(self, *args: str, sleep: float = 0.0, timeout: float = 10.0) -> Proc:
        """Start ``stator run app_fixture:stator ARGS`` in the background."""
        name = f"worker-{len(self.procs) + 1}"
        out, err = self.dir / f"{name}.out", self.dir / f"{name}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            popen = subprocess.Popen(
                [*STATOR, "run", APP, *args], cwd=self.dir, env=self.env(sleep, timeout),
                stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
            )
        proc = Proc(popen, name, out, err)
        self.procs.append(proc)
        return proc

    def cli(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run a ``stator`` command to completion; stdout and stderr (without colour codes)."""
        try:
            done = subprocess.run(
                [*STATOR, *args], cwd=self.dir, env=self.env(), stdin=subprocess.DEVNULL,
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


@pytest.fixture
def proc_app(proc_db_url: str, tmp_path: Path) -> Iterator[ProcApp]:
    app = ProcApp(proc_db_url, tmp_path)
    try:
        yield app
    finally:
        app.close()
