"""A task imported under another name: the path ``TASK_LIMITS`` must not use (the task's rows
carry ``tasks_jobs.shout``)."""

from tasks_jobs import shout as loud  # noqa: F401
