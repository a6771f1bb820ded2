"""Settings for the process tests: the database comes from the environment
(``DJTEST_SQLITE``: a file; or ``DJTEST_PG``: a PostgreSQL database name), and so may the
package the ``orders`` app's migrations are written to (``DJTEST_MIGRATIONS``: the tests run
``makemigrations`` and ``migrate`` there, as a project would)."""

import os

from .settings import *  # noqa: F403

if os.environ.get("DJTEST_PG"):
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": os.environ["DJTEST_PG"],
        "USER": os.environ.get("STATOR_TEST_PG_USER", "postgres"),
        "HOST": os.environ.get("STATOR_TEST_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("STATOR_TEST_PG_PORT", "5432"),
    }}
else:
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["DJTEST_SQLITE"],
        "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
    }}

if os.environ.get("DJTEST_PG_POOLED"):
    # Behind a transaction-pooling PgBouncer: no server-side prepared statements or cursors
    # (a session's state does not outlive its transaction there).
    DATABASES["default"]["OPTIONS"] = {"prepare_threshold": None}
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
if os.environ.get("DJTEST_LISTEN_URL"):  # wake-ups straight to the server, past the pooler
    STATOR = {**STATOR, "LISTEN_URL": os.environ["DJTEST_LISTEN_URL"]}  # noqa: F405
if os.environ.get("DJTEST_MIGRATIONS"):
    MIGRATION_MODULES = {"orders": os.environ["DJTEST_MIGRATIONS"]}
