"""Fixtures for the launcher's tests: tenant databases, real launcher processes, waiting.

``launch``: a directory with a copy of ``tenant_app.py``, helpers to make SQLite tenants
(migrated or not, with jobs), start ``stator launcher`` processes, run other ``stator``
commands, and read the launcher's state file.  Everything a test starts is stopped and
reaped at the end -- launchers, and any scheduler they may have left behind.

``pg_tenants``: throwaway PostgreSQL databases sharing one random name prefix (so that a
launcher discovering ``postgresql://…/<prefix>*`` sees those and nothing else on the shared
server), dropped WITH (FORCE) at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest
from sqlalchemy import Table, func, insert, select, text

from pgserver import PG_ADMIN_URL, _pg_connect, _pg_url
from stator import Stator
from stator._launcher._children import is_our_scheduler

from . import tenant_app

APP = "tenant_app:stator"
STATOR = [sys.executable, "-c", "from stator.cli import main; main(prog_name='stator')"]
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
jobs = cast(Table, tenant_app.Job.__table__)


def wait_until(check: Callable[[], Any], timeout: float, what: str,
               describe: Callable[[], str] = lambda: "") -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after
    ``timeout`` seconds.  A bounded wait, never a timing assertion."""
    deadline = time.monotonic() + timeout
    pause = 0.02
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n{describe()}")
        time.sleep(pause)
        pause = min(pause * 1.5, 0.25)


class Proc:
    """A ``stator`` process writing to files (no pipe can fill up and block it)."""

    def __init__(self, popen: subprocess.Popen[bytes], name: str, err: Path) -> None:
        self.popen = popen
        self.name = name
        self.err = err

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stderr(self) -> str:
        return ANSI.sub("", self.err.read_text(errors="replace")) if self.err.exists() else ""

    def describe(self) -> str:
        tail = "\n".join(self.stderr().splitlines()[-40:])
        return f"{self.name} (pid {self.pid}, exit code {self.popen.poll()}):\n{tail}"

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.name} still running after {timeout:g}s\n{self.describe()}")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then the exit code (the launcher stops its schedulers first)."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def reap(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()


class Launch:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.tenants = directory / "tenants"
        self.tenants.mkdir()
        self.control = directory / ".stator-launcher"
        self.procs: list[Proc] = []
        self._stators: dict[str, Stator] = {}
        self.seen_pids: set[tuple[int, str | None]] = set()
        shutil.copy(Path(tenant_app.__file__), directory / "tenant_app.py")

    # -- tenants -----------------------------------------------------------------------------

    def url(self, name: str) -> str:
        return f"sqlite:///{self.tenants / name}.db"

    def stator(self, url: str) -> Stator:
        if url not in self._stators:
            self._stators[url] = tenant_app.stator.with_db(url)
        return self._stators[url]

    def tenant(self, name: str, jobs_count: int = 0, *, migrated: bool = True) -> str:
        url = self.url(name)
        if migrated:
            self.stator(url).migrate()
            self.insert(url, jobs_count)
        else:
            with self.stator(url).engine.begin() as conn:
                conn.execute(text("CREATE TABLE unrelated (id INTEGER PRIMARY KEY)"))
        return url

    def insert(self, url: str, count: int, first: int = 1) -> None:
        if count:
            with self.stator(url).engine.begin() as conn:
                conn.execute(insert(jobs), [{"id": i} for i in range(first, first + count)])

    def states(self, url: str) -> Counter[str]:
        with self.stator(url).engine.connect() as conn:
            rows = conn.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state))
            return Counter({state: count for state, count in rows})

    def done(self, url: str) -> int:
        return self.states(url)["done"]

    # -- processes ---------------------------------------------------------------------------

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", COLUMNS="250",
                   NO_COLOR="1", **extra)
        return env

    def launcher(self, *args: str, max_workers: int = 3, sleep: float = 0.0,
                 discover: str | None = None) -> Proc:
        name = f"launcher-{len(self.procs) + 1}"
        err = self.dir / f"{name}.err"
        argv = [
            *STATOR, "launcher", APP,
            "--discover", discover or f"sqlite:///{self.tenants}/*.db",
            "--max-workers", str(max_workers), "--discover-every", "0.5",
            "--poll-every", "0.2", "--idle-window", "0.5", "--stop-grace", "10",
            "--backoff-floor", "0.3", "--backoff-max", "2", *args,
        ]
        with err.open("wb") as stderr:
            popen = subprocess.Popen(
                argv, cwd=self.dir, env=self.env(STATOR_TENANT_SLEEP=str(sleep)),
                stdin=subprocess.DEVNULL, stdout=stderr, stderr=subprocess.STDOUT,
            )
        proc = Proc(popen, name, err)
        self.procs.append(proc)
        return proc

    def cli(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(
                [*STATOR, *args], cwd=self.dir, env=self.env(), stdin=subprocess.DEVNULL,
                capture_output=True, text=True, timeout=timeout, check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"`stator {' '.join(args)}` did not finish within {timeout:g}s")
        done.stdout, done.stderr = ANSI.sub("", done.stdout), ANSI.sub("", done.stderr)
        return done

    # -- the launcher's state ----------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads((self.control / "state.json").read_text())
        except (FileNotFoundError, ValueError):
            return {"launcher": {}, "databases": []}
        for db in data["databases"]:
            if db.get("pid"):
                self.seen_pids.add((db["pid"], db.get("proc_start")))
        return data

    def db(self, url: str) -> dict[str, Any]:
        """The state-file entry of one database ({} until the launcher knows it)."""
        key = key_for(url)
        found: dict[str, Any] = next(
            (db for db in self.state()["databases"] if db["database"] == key), {})
        return found

    def polls(self) -> int:
        return int(self.state()["launcher"].get("polls", 0))

    def after_polls(self, count: int, timeout: float = 30.0) -> None:
        """Wait until the launcher has completed ``count`` more full rounds (each reads
        every database's messages)."""
        target = self.polls() + count
        wait_until(lambda: self.polls() >= target, timeout, f"{count} launcher rounds",
                   self.describe)

    def describe(self) -> str:
        state = json.dumps(self.state(), indent=1)
        return "\n".join([*(p.describe() for p in self.procs), state[-4000:]])

    def close(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(Exception):
                proc.stop(timeout=30)
            proc.reap()
        self.state()
        for pid, proc_start in self.seen_pids:  # a scheduler a killed launcher left behind
            if is_our_scheduler(pid, proc_start):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for stator in self._stators.values():
            stator.dispose()


def key_for(url: str) -> str:
    from stator._launcher._discovery import key_of, normalize

    return key_of(normalize(url))


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Launch]:
    run = Launch(tmp_path)
    try:
        yield run
    finally:
        run.close()


class PgTenants:
    def __init__(self, admin: psycopg.Connection[Any]) -> None:
        self.admin = admin
        self.prefix = f"stator_lt_{secrets.token_hex(4)}_"
        self.made: list[str] = []

    @property
    def pattern(self) -> str:
        url = PG_ADMIN_URL.set(drivername="postgresql", database=f"{self.prefix}*")
        return url.render_as_string(hide_password=False)

    def create(self, name: str) -> str:
        database = f"{self.prefix}{name}"
        self.admin.execute(f'CREATE DATABASE "{database}"')
        self.made.append(database)
        return _pg_url(database).render_as_string(hide_password=False)

    def drop(self, url: str) -> None:
        database = url.rsplit("/", 1)[-1]
        self.admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


@pytest.fixture
def pg_tenants() -> Iterator[PgTenants]:
    maintenance = PG_ADMIN_URL.database or "postgres"
    try:
        admin = _pg_connect(maintenance)
    except psycopg.OperationalError as exc:
        reason = f"PostgreSQL is not reachable: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    with admin:
        tenants = PgTenants(admin)
        try:
            yield tenants
        finally:
            for database in tenants.made:
                with contextlib.suppress(psycopg.Error):  # a template cannot be dropped
                    admin.execute(f'ALTER DATABASE "{database}" IS_TEMPLATE false')
                admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
