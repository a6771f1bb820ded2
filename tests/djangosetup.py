"""Django for the in-process tests: ``djtest.settings``, and a database alias per test.

Every directory whose tests build Django models or the Django driver (tests/django,
tests/driver, tests/engine) calls ``configure`` from its conftest, before anything imports a
model: Django's app registry must be ready first.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from pgserver import _pg_url

DJANGO_TESTS = Path(__file__).resolve().parent / "django"


def configure() -> None:
    """``djtest.settings`` set up, leaving no trace in the environment (the subprocesses some
    tests start must not inherit the settings module)."""
    if str(DJANGO_TESTS) not in sys.path:
        sys.path.insert(0, str(DJANGO_TESTS))
    ours = "DJANGO_SETTINGS_MODULE" not in os.environ
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djtest.settings")
    import django

    django.setup()
    if ours:
        del os.environ["DJANGO_SETTINGS_MODULE"]


def new_schema(pg_admin: psycopg.Connection[Any]) -> str:
    """A new empty schema in the session's PostgreSQL database, for one test."""
    schema = f"t_{secrets.token_hex(6)}"
    pg_admin.execute(f'CREATE SCHEMA "{schema}"')
    return schema


@contextmanager
def database_alias(
    name: str, tmp_path: Path, blocker: Any, pg_database: str | None = None,
    pg_options: str = "",
) -> Iterator[str]:
    """A Django database alias of its own, empty: a new SQLite file, or (given
    ``pg_database``) PostgreSQL with ``pg_options`` (``-csearch_path=`` a new schema, see
    ``new_schema``): Django's shared test databases are flushed between tests, which leaves
    Stator's own tables behind."""
    from django.db import connections

    if pg_database is None:
        conf = {**connections.settings["default"], "NAME": str(tmp_path / f"{name}.db")}
    else:
        url = _pg_url(pg_database)
        conf = {
            **connections.settings["pg"], "NAME": url.database, "USER": url.username,
            "PASSWORD": url.password or "", "HOST": url.host, "PORT": str(url.port or 5432),
            "OPTIONS": {"options": pg_options},
        }
    connections.settings[name] = conf
    try:
        with blocker.unblock():
            yield name
            connections[name].close()
    finally:
        del connections[name]
        del connections.settings[name]
