"""The engine's behavioural suite: every test once per integration and database.

``backend`` is where a test's rows live, for one of {SQLAlchemy, Django} x {SQLite,
PostgreSQL}: a database URL (SQLAlchemy) or a Django database alias of the test's own (a new
SQLite file, or a new PostgreSQL schema).  ``build_models`` declares the test's models as that
integration declares them, and ``make_stator`` builds the Stator the way the integration's
users do (``Stator(url, ...)``, or ``build_stator`` as ``runstator`` does, after creating the
tables as Django's migrations would).  Where a test acts as the application, it goes through
``app_side``, which speaks the ORM of the Stator at hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import djangosetup

djangosetup.configure()

import pytest  # noqa: E402
from django.apps.registry import Apps  # noqa: E402
from django.db import connections, models  # noqa: E402

from pgserver import _pg_url  # noqa: E402
from stator import ManualClock, StateGraph, Stator  # noqa: E402
from stator.django._setup import build_stator  # noqa: E402
from stator.django.models import StatorModel  # noqa: E402

INTEGRATIONS = ["sqlalchemy-sqlite", "sqlalchemy-postgresql", "django-sqlite",
                "django-postgresql"]


@pytest.fixture(params=INTEGRATIONS)
def integration(request: pytest.FixtureRequest) -> str:
    """``sqlalchemy`` or ``django``, then ``-`` and the database."""
    return str(request.param)


@pytest.fixture
def backend(request: pytest.FixtureRequest, integration: str, tmp_path: Path) -> Iterator[str]:
    """A database URL (SQLAlchemy) or a Django alias (Django), over an empty database."""
    kind, database = integration.split("-")
    pg_database = pg_options = ""
    if database == "postgresql":
        pg_database = request.getfixturevalue("pg_database")
        schema = djangosetup.new_schema(request.getfixturevalue("pg_admin"))
        pg_options = f"-csearch_path={schema}"
    if kind == "django":
        blocker = request.getfixturevalue("django_db_blocker")
        with djangosetup.database_alias(
            f"engine_{database}", tmp_path, blocker, pg_database or None, pg_options,
        ) as alias:
            yield alias
        return
    if pg_database:
        url = _pg_url(pg_database).update_query_dict({"options": pg_options})
        yield url.render_as_string(hide_password=False)
    else:
        yield f"sqlite:///{tmp_path / 'stator.db'}"


def build_django_models(
    graph: type[StateGraph], *, table: str = "orders", history: bool = False,
    string_pk: bool = False,
) -> SimpleNamespace:
    """Django's ``Order`` (run by ``graph``) and a plain ``Line``, as tests/conftest.py's
    ``build_models`` declares them for SQLAlchemy; in a registry of their own, so each test
    declares them afresh."""
    registry = Apps()

    class Order(StatorModel):
        state_graph = graph
        if string_pk:
            id = models.CharField(max_length=40, primary_key=True)
        note = models.CharField(max_length=100, null=True)
        if history:
            state_history = models.JSONField(null=True)

        class Meta:
            apps = registry
            app_label = "engine_suite"
            db_table = table

    class Line(models.Model):
        order_id = models.CharField(max_length=40)
        text = models.CharField(max_length=100)

        class Meta:
            apps = registry
            app_label = "engine_suite"
            db_table = f"{table}_lines"

    return SimpleNamespace(Order=Order, Line=Line)


@pytest.fixture
def build_models(
    integration: str, build_models: Callable[..., SimpleNamespace]
) -> Callable[..., SimpleNamespace]:
    """``build_models(graph, table=..., history=..., string_pk=...)``: ``Order`` and ``Line``
    of the integration (SQLAlchemy's: tests/conftest.py's ``build_models``)."""
    if integration.startswith("django"):
        return build_django_models
    return build_models


@pytest.fixture
def make_stator(integration: str, backend: str) -> Iterator[Callable[..., Stator]]:
    """``make_stator(backend, models, clock, **options)``: a migrated Stator over ``models``
    (with Django, their tables made first, as its migrations would); disposed afterwards."""
    made: list[Stator] = []

    def make(target: str, models: list[type], clock: ManualClock, **options: Any) -> Stator:
        if integration.startswith("django"):
            with connections[target].schema_editor() as editor:
                for model in models:
                    editor.create_model(model)
            stator = build_stator(models=models, clock=clock, alias=target, **options)
        else:
            stator = Stator(target, models, clock=clock, **options)
        made.append(stator)
        stator.migrate()
        return stator

    yield make
    for stator in made:
        stator.dispose()
