"""Settings for the in-process Django tests: one SQLite file ("default") and one PostgreSQL
database ("pg"), each a throwaway test database made by pytest-django for this run."""

import os
import secrets
import tempfile

_RUN = f"{os.getpid()}_{secrets.token_hex(3)}"

SECRET_KEY = "tests-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.admin",
    "stator.django",
    "djtest.orders",
    "djtest.taskproxy",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
ROOT_URLCONF = "djtest.urls"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(tempfile.gettempdir(), f"stator_dj_{_RUN}.db"),
        "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;"},
        "TEST": {"NAME": os.path.join(tempfile.gettempdir(), f"stator_djtest_{_RUN}.db")},
    },
    "pg": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": os.environ.get("STATOR_TEST_PG_USER", "postgres"),
        "HOST": os.environ.get("STATOR_TEST_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("STATOR_TEST_PG_PORT", "5432"),
        "TEST": {"NAME": f"stator_djtest_{_RUN}"},
    },
}
STATOR = {"CONCURRENCY": 2, "TOKEN": "s3cret-token"}
