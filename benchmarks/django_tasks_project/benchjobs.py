"""The benchmark's task: does nothing, so what is measured is the backend."""

from django.tasks import task


@task
def noop() -> None:
    return None


@task
def stamp(path: str) -> None:
    """Writes the time it started (``benchmarks/django_tasks.py --startup``)."""
    import time
    from pathlib import Path

    Path(path).write_text(repr(time.time()))
