"""Shared fixtures: a database per backend, a manual clock, fresh models, a migrated Stator.

PostgreSQL isolation: one throwaway database per test session (dropped with FORCE at the
end) and one fresh schema per test, selected through the URL's ``search_path`` option.  The
shared server itself is never restarted or reconfigured.
"""

import os
import random
import secrets
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
from hypothesis import settings
from sqlalchemy import JSON, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from pgserver import PG_ADMIN_URL, _pg_connect, _pg_url
from stator import ManualClock, StateGraph, Stator
from stator.sqlalchemy import StatorMixin

# Property tests must not leave an example database behind in the working tree.
settings.register_profile("stator", database=None, deadline=None)
settings.load_profile("stator")


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """The name of a throwaway database created for this test session."""
    name = f"stator_test_{os.getpid()}_{secrets.token_hex(4)}"
    maintenance = PG_ADMIN_URL.database or "postgres"
    try:
        admin = _pg_connect(maintenance)
    except psycopg.OperationalError as exc:
        where = PG_ADMIN_URL.render_as_string(hide_password=True)
        reason = f"PostgreSQL is not reachable at {where} (set STATOR_TEST_PG): {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield name
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_admin(pg_database: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the session's database, for creating test schemas."""
    with _pg_connect(pg_database) as conn:
        yield conn


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """A database URL for an empty database: a new SQLite file, or a new PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'stator.db'}"
    admin: psycopg.Connection[Any] = request.getfixturevalue("pg_admin")
    database: str = request.getfixturevalue("pg_database")
    schema = f"t_{secrets.token_hex(6)}"
    admin.execute(f'CREATE SCHEMA "{schema}"')
    url = _pg_url(database).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


@pytest.fixture
def clock() -> ManualClock:
    """A clock a minute ahead of real time.

    Rows inserted without Stator columns get the database's real time from server defaults;
    starting ahead of it makes those rows due for the engine straight away.
    """
    return ManualClock(datetime.now(UTC) + timedelta(minutes=1))


def build_models(
    graph: type[StateGraph],
    *,
    table: str = "orders",
    history: bool = False,
    string_pk: bool = False,
) -> SimpleNamespace:
    """A fresh declarative Base with ``Order`` (run by ``graph``) and a plain ``Line`` model.

    Each call gets its own metadata, so tests can declare the same table names freely.
    """

    class Base(DeclarativeBase):
        pass

    class Order(StatorMixin, Base):
        __tablename__ = table
        state_graph = graph
        if string_pk:
            id: Mapped[str] = mapped_column(String(40), primary_key=True)
        else:
            id: Mapped[int] = mapped_column(primary_key=True)
        note: Mapped[str | None] = mapped_column(String(100))
        if history:
            state_history: Mapped[list[Any] | None] = mapped_column(JSON)

    class Line(Base):
        __tablename__ = f"{table}_lines"
        id: Mapped[int] = mapped_column(primary_key=True)
        order_id: Mapped[str] = mapped_column(String(40))
        text: Mapped[str] = mapped_column(String(100))

    return SimpleNamespace(Base=Base, Order=Order, Line=Line)


@pytest.fixture(name="build_models")
def build_models_fixture() -> Callable[..., SimpleNamespace]:
    return build_models


@pytest.fixture
def make_stator(backend: str) -> Iterator[Callable[..., Stator]]:
    """``make_stator(url, models, clock, **options)``: a migrated Stator, disposed afterwards.

    Depends on ``backend`` so its engines are closed before the database goes away.
    """
    made: list[Stator] = []

    def make(url: str, models: list[type], clock: ManualClock, **options: Any) -> Stator:
        stator = Stator(url, models, clock=clock, **options)
        made.append(stator)
        stator.migrate()
        return stator

    yield make
    for stator in made:
        stator.dispose()


DEFAULT_SEED = 20261123


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    """Random numbers for a test, from a fixed seed (``STATOR_TEST_SEED`` to change it),
    printed with the test's report when it fails so the same draw can be repeated."""
    seed = int(os.environ.get("STATOR_TEST_SEED", DEFAULT_SEED))
    request.node.add_report_section(
        "call", "random seed", f"random numbers drawn with seed {seed}: rerun with "
        f"STATOR_TEST_SEED={seed} to repeat them",
    )
    return random.Random(seed)
