"""Threads and PostgreSQL connections of a worker whose handlers hang for good (issue 20,
item 8): the most seen while it runs and the count at its end, against the bound.

    python benchmarks/hung_handlers.py run        # `stator run -c 2`, 20 rows that hang
    .venv-django6/bin/python benchmarks/hung_handlers.py runstator   # `runstator -c 2`, 6 tasks

Each handler sleeps far past its state's timeout (0.5 s); with ``retry_after=1`` the
timed-out rows come back and hang again, so without a cap the hung threads pile up for as
long as the worker runs (``--run-for``, 20 s).  ``--src DIR`` runs another checkout's
``src`` (to measure before a change).  Threads are read from ``/proc/PID/status``;
connections from ``pg_stat_activity`` for the run's own throwaway database.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
TASKPROJ = ROOT / "tests" / "django" / "taskproj"
CONCURRENCY = 2

APP = '''
import time
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from stator import State, StateGraph, Stator
from stator.sqlalchemy import StatorMixin


class Base(DeclarativeBase):
    pass


class Hangs(StateGraph):
    new = State(timeout=0.5, retry_after=1)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row):
        time.sleep(120)  # far past the deadline; the process ends first
        return cls.done


class Job(StatorMixin, Base):
    __tablename__ = "hung_jobs"
    state_graph = Hangs
    id: Mapped[int] = mapped_column(primary_key=True)


stator = Stator({url!r}, models=[Job])
'''


def admin() -> psycopg.Connection[tuple[int]]:
    return psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres",
                           autocommit=True)


def watch(
    command: list[str], env: dict[str, str], database: str, cwd: Path | None = None,
) -> dict[str, object]:
    """Run ``command``; sample its threads and the database's connections every 50 ms."""
    threads: list[int] = []
    conns: list[int] = []
    with psycopg.connect(host="127.0.0.1", user="postgres", dbname=database,
                         autocommit=True) as watcher:
        proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        while proc.poll() is None:
            try:
                status = Path(f"/proc/{proc.pid}/status").read_text()
                threads.append(int(status.split("Threads:")[1].split()[0]))
            except (OSError, IndexError):
                pass
            row = watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                                  "AND pid <> pg_backend_pid()", [database]).fetchone()
            conns.append(int(row[0]) if row else 0)
            time.sleep(0.05)
        stderr = proc.stderr.read() if proc.stderr else ""
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    return {
        "exit_code": proc.returncode,
        "threads_most": max(threads, default=0), "threads_at_end": threads[-1] if threads else 0,
        "connections_most": max(conns, default=0),
        "connections_at_end": conns[-1] if conns else 0,
        "seconds": round(len(conns) * 0.05, 1), "error_line": errors[-1] if errors else "",
    }


def measure_run(src: Path, database: str, folder: Path) -> dict[str, object]:
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}"
    (folder / "hung_app.py").write_text(APP.format(url=url))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(src)])}
    stator = [sys.executable, "-c", "from stator.cli import main; main()"]
    subprocess.run([*stator, "migrate", "hung_app:stator"], env=env, check=True,
                   capture_output=True, cwd=folder)
    insert = ("from hung_app import stator, Job\nfrom sqlalchemy.orm import Session\n"
              "with Session(stator.engine) as s:\n"
              "    s.add_all([Job(id=i) for i in range(1, 21)]); s.commit()\n")
    subprocess.run([sys.executable, "-c", insert], env=env, check=True, cwd=folder)
    return watch([*stator, "run", "hung_app:stator", "--concurrency", str(CONCURRENCY),
                  "--run-for", "20", "--log-level", "ERROR"], env, database, folder)


def measure_runstator(src: Path, database: str, folder: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(TASKPROJ)]),
           "TASKPROJ_PG": f"postgresql://postgres@127.0.0.1:5432/{database}",
           "TASKPROJ_TIMEOUT": "0.5", "TASKPROJ_CONCURRENCY": str(CONCURRENCY)}
    manage = [sys.executable, str(TASKPROJ / "manage.py")]
    subprocess.run([*manage, "migrate", "-v", "0"], env=env, check=True)
    never = folder / "never-released"
    enqueue = ("from jobs import hang_until\n"
               f"[hang_until.enqueue({str(never)!r}) for _ in range(6)]")
    subprocess.run([*manage, "shell", "-c", enqueue], env=env, check=True)
    return watch([*manage, "runstator", "--run-for", "20"], env, database)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["run", "runstator"])
    parser.add_argument("--src", type=Path, default=ROOT / "src")
    args = parser.parse_args()
    database = f"stator_hung_{secrets.token_hex(4)}"
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    try:
        with tempfile.TemporaryDirectory() as folder:
            measure = measure_run if args.command == "run" else measure_runstator
            result = measure(args.src.resolve(), database, Path(folder))
    finally:
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    result["command"] = f"{'stator run' if args.command == 'run' else 'runstator'} -c 2"
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
