"""The engine's behavioural suite (tests/test_engine.py) on the Django store.

The same test bodies, with Django's flavour of their fixtures: ``backend`` is a Django
database alias of the test's own (a new SQLite file, or a new PostgreSQL schema: Django's
test databases are shared, and their flush leaves Stator's tables behind), ``build_models``
declares ``Order`` and ``Line`` as Django models, and ``make_stator`` creates their tables and
builds the Stator the way ``runstator`` does (``build_stator``).  tests/test_engine.py runs
them on SQLAlchemy; together: {SQLAlchemy, Django} x {SQLite, PostgreSQL}.
"""

import secrets
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
from django.apps.registry import Apps
from django.db import connections, models

import test_engine
from pgserver import _pg_url
from stator import ManualClock, StateGraph, Stator
from stator.django._setup import build_stator
from stator.django.models import StatorModel

# The tests themselves: collected here again, with this module's fixtures.
globals().update({name: test for name, test in vars(test_engine).items()
                  if name.startswith("test_")})


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Any, django_db_blocker: Any) -> Iterator[str]:
    """The alias of a Django database for this test alone, empty."""
    alias = f"engine_{request.param}"
    if request.param == "sqlite":
        conf = {**connections.settings["default"], "NAME": str(tmp_path / "django.db")}
    else:
        admin: psycopg.Connection[Any] = request.getfixturevalue("pg_admin")
        url = _pg_url(request.getfixturevalue("pg_database"))
        schema = f"t_{secrets.token_hex(6)}"
        admin.execute(f'CREATE SCHEMA "{schema}"')
        conf = {
            **connections.settings["pg"], "NAME": url.database, "USER": url.username,
            "PASSWORD": url.password or "", "HOST": url.host, "PORT": str(url.port or 5432),
            "OPTIONS": {"options": f"-csearch_path={schema}"},
        }
    connections.settings[alias] = conf
    try:
        with django_db_blocker.unblock():
            yield alias
            connections[alias].close()
    finally:
        del connections[alias]
        del connections.settings[alias]


@pytest.fixture(name="build_models")
def build_django_models() -> Callable[..., SimpleNamespace]:
    def build(
        graph: type[StateGraph], *, table: str = "orders", history: bool = False,
        string_pk: bool = False,
    ) -> SimpleNamespace:
        """Django's ``Order`` (run by ``graph``) and a plain ``Line``, as in test_engine.py's
        ``build_models``; in a registry of their own, so each test declares them afresh."""
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

    return build


@pytest.fixture
def make_stator() -> Callable[..., Stator]:
    """``make_stator(alias, models, clock, **options)``: the models' tables (Django's
    migrations would make them) and a Stator over them, its own tables migrated."""

    def make(alias: str, models: list[type], clock: ManualClock, **options: Any) -> Stator:
        with connections[alias].schema_editor() as editor:
            for model in models:
                editor.create_model(model)
        stator = build_stator(models=models, clock=clock, alias=alias, **options)
        stator.migrate()
        return stator

    return make
