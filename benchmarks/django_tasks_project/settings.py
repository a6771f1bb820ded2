"""The project ``benchmarks/django_tasks.py`` drives: the same no-op task on Stator's task
backend or on the reference database backend (``django-tasks-db``).

Environment: ``BENCH_BACKEND`` = ``stator`` | ``reference``; ``BENCH_SQLITE`` (a file) or
``BENCH_PG`` (``postgresql://user@host:port/name``); ``BENCH_CONN_MAX_AGE`` (seconds, or
``none`` for persistent connections, the reference's best case).
"""

import os
from urllib.parse import urlsplit

SECRET_KEY = "benchmark-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
_backend = os.environ.get("BENCH_BACKEND", "stator")
if _backend == "stator":
    INSTALLED_APPS = ["stator.django"]
    TASKS = {"default": {"BACKEND": "stator.django.tasks.StatorBackend"}}
else:
    INSTALLED_APPS = ["django_tasks_db"]
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
STATOR = {"CONCURRENCY": 4}

_age = os.environ.get("BENCH_CONN_MAX_AGE", "0")
_max_age = None if _age == "none" else int(_age)
_pg = os.environ.get("BENCH_PG")
if _pg:
    _url = urlsplit(_pg)
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": _url.path.lstrip("/"),
        "USER": _url.username or "postgres", "HOST": _url.hostname or "127.0.0.1",
        "PORT": str(_url.port or 5432), "CONN_MAX_AGE": _max_age,
    }}
else:
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["BENCH_SQLITE"],
        "CONN_MAX_AGE": _max_age,
        "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;"},
    }}
