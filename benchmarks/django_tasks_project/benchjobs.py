"""The benchmark's task: does nothing, so what is measured is the backend."""

from django.tasks import task


@task
def noop() -> None:
    return None
