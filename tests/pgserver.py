"""The shared PostgreSQL server the tests use (a module of its own: ``conftest`` is an
ambiguous name once tests/django has a conftest too)."""

import os
from typing import Any

import psycopg
from sqlalchemy import URL, make_url

# The server to use, as a URL to its maintenance database (trust auth by default).
PG_ADMIN_URL = make_url(
    os.environ.get("STATOR_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
)


def _pg_url(database: str) -> URL:
    return PG_ADMIN_URL.set(drivername="postgresql+psycopg", database=database)


def _pg_connect(database: str) -> psycopg.Connection[Any]:
    url = _pg_url(database)
    return psycopg.connect(
        host=url.host, port=url.port or 5432, user=url.username, password=url.password,
        dbname=database, connect_timeout=5, autocommit=True,
    )
