"""A scheduler's database URL, password included, never appears on a command line (where
``ps`` shows it to every user of the machine): the launcher hands it over in the
scheduler's environment."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from stator._launcher._children import SchedulerCommand, spawn

from . import tenant_app

SECRET = "s3cret-Pa55"


def test_no_scheduler_argv_contains_the_password(tmp_path: Path) -> None:
    shutil.copy(tenant_app.__file__, tmp_path / "tenant_app.py")
    command = SchedulerCommand(app="tenant_app:stator", idle_window=0.1, concurrency=None,
                               log_level="INFO", cwd=tmp_path)
    url = f"postgresql://someone:{SECRET}@127.0.0.1:1/nowhere"  # nothing listens on port 1
    ended = threading.Event()
    log = tmp_path / "scheduler.log"
    child = spawn(command, "key", url, None, log, ended.set)
    try:
        assert all(SECRET not in arg for arg in child.popen.args)  # type: ignore[union-attr]
        assert child.popen.wait(60) == 1  # it got the URL: its database cannot be reached
    finally:
        if child.popen.poll() is None:
            child.popen.kill()
            child.popen.wait()
    output = log.read_text()
    assert "port 1" in output, output
    assert SECRET not in output
