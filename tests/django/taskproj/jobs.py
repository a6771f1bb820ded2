"""Tasks for the process tests and the benchmark."""

import time
from pathlib import Path

from django.tasks import task


@task
def noop() -> None:
    return None


@task
def refuse(message: str) -> None:
    raise ValueError(message)


@task
def slow_first_time(markers: str) -> str:
    """Leaves a marker per run; the first run hangs (until its worker is killed)."""
    folder = Path(markers)
    runs = len(list(folder.iterdir()))
    (folder / f"run-{runs}").touch()
    if runs == 0:
        time.sleep(600)
    return "done"


@task
def announced_sleep(marker: str, seconds: float) -> str:
    """Leaves ``marker`` when it starts, then takes ``seconds``: a task in flight."""
    Path(marker).touch()
    time.sleep(seconds)
    return "slept"


@task
def exits(code: int) -> None:
    """Raises ``SystemExit``: the task's failure, not the worker's end."""
    raise SystemExit(code)


@task
def hang_until(release: str) -> str:
    """Hangs (far past the tasks' timeout) until the file ``release`` exists, or a minute."""
    deadline = time.monotonic() + 60
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "released"
