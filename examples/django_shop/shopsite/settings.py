"""Settings of the example shop.

The database is SQLite (``shop.db`` here) unless ``SHOP_DATABASE`` names a PostgreSQL
database as ``postgresql://user@host:port/name``.
"""

import os
from pathlib import Path
from urllib.parse import urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "shopsite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "stator.django",
    "shop",
    "courier",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]

TASKS = {"default": {"BACKEND": "stator.django.tasks.StatorBackend",
                     "QUEUES": ["default", "mail"], "OPTIONS": {"max_attempts": 3}},
         # The courier's API is flaky: its bookings are retried quickly, up to five times.
         "courier": {"BACKEND": "stator.django.tasks.StatorBackend", "QUEUES": ["courier"],
                     "OPTIONS": {"max_attempts": 5, "retry_after": 0.2}}}
STATOR = {"CONCURRENCY": 4}


def _database(url: str | None) -> dict[str, object]:
    if not url:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": BASE_DIR / "shop.db",
            # WAL lets the site read while a worker writes (see `manage.py check`).
            "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;"},
        }
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": parts.username or "postgres",
        "PASSWORD": parts.password or "",
        "HOST": parts.hostname or "127.0.0.1",
        "PORT": str(parts.port or 5432),
    }


DATABASES = {"default": _database(os.environ.get("SHOP_DATABASE"))}
