"""A minimal project for the task backend's process tests and benchmark.

The database is a SQLite file at ``$TASKPROJ_SQLITE`` or, when ``$TASKPROJ_PG`` names one, a
PostgreSQL database (``postgresql://user@host:port/name``).
"""

import os
from urllib.parse import urlsplit

SECRET_KEY = "tests-only"
DEBUG = os.environ.get("TASKPROJ_DEBUG") == "1"
USE_TZ = True
INSTALLED_APPS = ["stator.django"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# A short timeout, so a killed worker's lease (twice the timeout) runs out quickly.
TASKS = {"default": {"BACKEND": "stator.django.tasks.StatorBackend",
                     "OPTIONS": {"timeout": float(os.environ.get("TASKPROJ_TIMEOUT", "1"))}}}
STATOR = {"CONCURRENCY": int(os.environ.get("TASKPROJ_CONCURRENCY", "4"))}
# The schedules' process test: one task every second, every missed tick caught up.
if os.environ.get("TASKPROJ_SCHEDULE"):
    STATOR["SCHEDULE"] = {"tick": {"task": "jobs.noop", "every": 1, "missed": "all",
                                   "max_catch_up": 10_000}}

_pg = os.environ.get("TASKPROJ_PG")
if _pg:
    _url = urlsplit(_pg)
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": _url.path.lstrip("/"),
        "USER": _url.username or "postgres", "HOST": _url.hostname or "127.0.0.1",
        "PORT": str(_url.port or 5432),
    }}
else:
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["TASKPROJ_SQLITE"],
        "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;"},
    }}
