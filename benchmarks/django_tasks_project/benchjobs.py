"""The benchmark's task: does nothing, so what is measured is the backend."""

from django.tasks import task


@task
def noop() -> None:
    return None


@task
def stamp(path: str) -> None:
    """Writes the time it started and the CPU seconds its worker process had used by then
    (``benchmarks/django_tasks.py --startup``)."""
    import time
    from pathlib import Path

    Path(path).write_text(f"{time.time()!r} {time.process_time()!r}")
