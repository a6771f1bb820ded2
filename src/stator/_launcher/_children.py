"""Scheduler processes: starting, watching, stopping, and finding leftovers.

A scheduler is ``stator launcher-scheduler APP`` in a session of its own (a Ctrl-C
at the terminal reaches the launcher only; the launcher decides what its schedulers do).
Each gets a *lifeline*: the read end of a pipe whose write end only the launcher holds.
If the launcher dies, however abruptly, the pipe reads end-of-file and the scheduler stops
gracefully on its own.  A thread per child waits for it to exit and wakes the supervisor:
nothing polls.  Its database URL travels in its environment (``STATOR_SCHEDULER_DB``), not
on its command line, where ``ps`` would show any password in it to every user; and it travels
as its parts, never as URL text to be parsed again, where a database named
``t?host=elsewhere&port=5999`` would become a query string sending the scheduler, and its
password, to another server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import URL

log = logging.getLogger("stator.launcher")

EXIT_IDLE = 0        # nothing due within the idle window (or stopped when asked)
EXIT_NO_SCHEMA = 3   # the database has no (or an outdated) Stator schema
SCHEDULER_COMMAND = "launcher-scheduler"
URL_VARIABLE = "STATOR_SCHEDULER_DB"  # the scheduler's database URL's parts, password included
STATOR = [sys.executable, "-c", "from stator.cli import main; main(prog_name='stator')"]


@dataclass
class Child:
    key: str
    popen: subprocess.Popen[bytes]
    lifeline: int
    started: float  # monotonic
    log_path: Path
    proc_start: str | None  # the kernel's start time of the pid, to recognise it later
    yield_asked: bool = False
    kill_at: float | None = None
    terminated: bool = False  # stopped by the launcher's own decision
    watcher: threading.Thread | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exit_code(self) -> int | None:
        return self.popen.poll()


@dataclass(frozen=True)
class SchedulerCommand:
    app: str
    idle_window: float
    concurrency: int | None
    log_level: str
    cwd: Path

    def argv(self, wait_for: int | None, lifeline: int) -> list[str]:
        args = [*STATOR, SCHEDULER_COMMAND, self.app,
                "--idle-window", repr(self.idle_window), "--lifeline", str(lifeline),
                "--log-level", self.log_level]
        if self.concurrency is not None:
            args += ["--concurrency", str(self.concurrency)]
        if wait_for is not None:
            args += ["--after-message", str(wait_for)]
        return args


def url_parts(url: URL) -> str:
    """``url`` as its parts (JSON), for a scheduler's environment: see ``url_from_parts``."""
    return json.dumps({
        "drivername": url.drivername, "username": url.username, "password": url.password,
        "host": url.host, "port": url.port, "database": url.database,
        "query": {key: list(value) if isinstance(value, tuple) else value
                  for key, value in url.query.items()},
    })


def url_from_parts(text: str) -> URL:
    """The URL ``url_parts`` wrote, built from its parts: no part is parsed as URL text, so
    each stays what it was (a database name holding ``?`` is still that name)."""
    parts = json.loads(text)
    return URL.create(**parts)


def spawn(command: SchedulerCommand, key: str, url: URL, wait_for: int | None, log_path: Path,
          on_exit: Callable[[], None], when: str = "") -> Child:
    """Start a scheduler; ``on_exit`` is called from a watcher thread when it ends.  ``when``
    (the launcher's clock) heads this run's part of the log."""
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, False)
    env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS=os.environ.get("COLUMNS", "200"))
    env[URL_VARIABLE] = url_parts(url)
    try:
        with log_path.open("ab") as out:
            out.write(f"--- {when} starting scheduler\n".encode())
            out.flush()
            popen = subprocess.Popen(
                command.argv(wait_for, read_end), cwd=command.cwd, env=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                pass_fds=(read_end,), start_new_session=True,
            )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    child = Child(key=key, popen=popen, lifeline=write_end, started=time.monotonic(),
                  log_path=log_path, proc_start=proc_start_time(popen.pid))

    def watch() -> None:
        popen.wait()
        on_exit()

    child.watcher = threading.Thread(target=watch, name=f"stator-watch-{popen.pid}",
                                     daemon=True)
    child.watcher.start()
    return child


def ask_to_stop(child: Child, grace: float) -> None:
    """A graceful stop (SIGTERM: finish running handlers, hand back the rest); killed if
    still running ``grace`` seconds later (see ``enforce_deadline``)."""
    if child.exit_code() is None and child.kill_at is None:  # once: a second SIGTERM
        with contextlib.suppress(ProcessLookupError):        # would stop it at once
            child.popen.send_signal(signal.SIGTERM)
        child.kill_at = time.monotonic() + grace


def enforce_deadline(child: Child) -> None:
    if child.kill_at is not None and time.monotonic() >= child.kill_at:
        if child.exit_code() is None:
            log.warning("scheduler for %s (pid %d) did not stop in time: killing it",
                        child.key, child.pid, extra={"action": "scheduler_kill"})
            with contextlib.suppress(ProcessLookupError):
                child.popen.kill()
        child.kill_at = None


def terminate(child: Child, grace: float) -> int:
    """Stop a scheduler and wait until it has exited (TimescaleDB's "terminate and wait for
    shutdown"): SIGTERM, then SIGKILL after ``grace`` seconds.  Returns its exit code."""
    child.terminated = True
    ask_to_stop(child, grace)
    try:
        code = child.popen.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            child.popen.kill()
        code = child.popen.wait()
    close(child)
    return code


def terminate_all(children: list[Child], grace: float) -> None:
    """Stop many at once: signal them all, then wait for them together."""
    for child in children:
        child.terminated = True
        ask_to_stop(child, grace)
    deadline = time.monotonic() + grace
    for child in children:
        try:
            child.popen.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                child.popen.kill()
            child.popen.wait()
        close(child)


def close(child: Child) -> None:
    if child.lifeline >= 0:
        with contextlib.suppress(OSError):
            os.close(child.lifeline)
        child.lifeline = -1


def log_tail(path: Path, lines: int = 40) -> str:
    """The most telling line of a scheduler's recent output: its last ``error:`` line, else
    the last line of a traceback or of the output."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(f.tell() - 16384, 0))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    recent = [line.strip() for line in text.splitlines()[-lines:] if line.strip()]
    if recent and recent[-1].startswith("---"):
        recent = []
    start = max((i for i, line in enumerate(recent) if line.startswith("---")), default=-1)
    recent = recent[start + 1:]
    for line in reversed(recent):
        if line.startswith("error:"):
            return line[len("error:"):].strip()
    return recent[-1] if recent else ""


# -- leftovers from a previous launcher ------------------------------------------------------


def proc_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (Linux), so a recycled pid is never mistaken for
    a scheduler we started; None where /proc is not available."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw.rsplit(")", 1)[-1].split()[19]


def is_our_scheduler(pid: int, proc_start: str | None) -> bool:
    if proc_start is None or proc_start_time(pid) != proc_start:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return SCHEDULER_COMMAND.encode() in cmdline


def stop_leftover(pid: int, proc_start: str | None, grace: float) -> bool:
    """Stop a scheduler left by a previous launcher, if ``pid`` is still that process."""
    if not is_our_scheduler(pid, proc_start):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    pause = 0.01
    while is_our_scheduler(pid, proc_start) and time.monotonic() < deadline:
        # Not our child: there is no wait() for it, only looking again (bounded).
        time.sleep(pause)
        pause = min(pause * 2, 0.2)
    if is_our_scheduler(pid, proc_start):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return True
