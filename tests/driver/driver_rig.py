"""The conformance suite's rig: every test runs once per driver and database.

``rig`` is one of {SQLAlchemy, Django} x {SQLite, PostgreSQL} over an empty database (a new
SQLite file, a new PostgreSQL schema).  It declares the test's model as that integration
declares models, builds the driver the way the integration does (``Stator`` over a URL,
``build_stator`` over a Django alias) and hands the test the ``Driver`` alone: what the
suite checks is the interface, so whatever both drivers pass, the engine may rely on.

The application's side (inserting rows, reading them back, changing them behind the
engine's back) goes through the driver's own SQLAlchemy engine and the tracked table, the
same on both drivers.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import djangosetup

djangosetup.configure()

import psycopg  # noqa: E402
from django.apps.registry import Apps  # noqa: E402
from django.db import connections, models  # noqa: E402
from sqlalchemy import JSON, Integer, String, insert, select, update  # noqa: E402
from sqlalchemy.orm import DeclarativeBase, mapped_column  # noqa: E402

from pgserver import _pg_url  # noqa: E402
from stator import ManualClock, State, StateGraph, Stator  # noqa: E402
from stator._store._tracked import TrackedModel  # noqa: E402
from stator._store.interface import Driver  # noqa: E402
from stator._types import UTCDateTime  # noqa: E402
from stator.django._setup import build_stator  # noqa: E402
from stator.django.fields import StatorDateTimeField  # noqa: E402
from stator.django.models import StatorModel  # noqa: E402
from stator.sqlalchemy import StatorMixin  # noqa: E402

# A claim queued behind a row lock fails after this long instead of hanging the suite.
PG_LOCK_TIMEOUT = "-clock_timeout=3000"



class Flow(StateGraph):
    """The suite's graph: a handled state with a lease, one the application moves rows out
    of, and a final one whose rows are deleted after a minute."""

    new = State(timeout=10, retry_after=30)  # a claim's lease: twice the timeout
    held = State(externally_progressed=True)
    done = State(delete_after=60)
    new.transitions_to(done)
    new.transitions_to(held)
    held.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        return cls.done


COMBINATIONS = ["sqlalchemy-sqlite", "sqlalchemy-postgresql", "django-sqlite",
                "django-postgresql"]


class Rig:
    """One integration over one empty database (see the module docstring)."""

    def __init__(self, kind: str, database: str, target: str, clock: ManualClock,
                 pg_options: str = "", pg_database: str = "", sqlite_file: str = "") -> None:
        self.kind, self.database, self.target, self.clock = kind, database, target, clock
        self.pg_options, self.pg_database, self.sqlite_file = (
            pg_options, pg_database, sqlite_file)
        self.stators: list[Stator] = []

    @property
    def postgresql(self) -> bool:
        return self.database == "postgresql"

    # -- models and drivers -------------------------------------------------------------------

    def model(self, graph: type[StateGraph], *, table: str = "orders", priority: bool = False,
              history: bool = False, times: tuple[str, ...] = (), texts: tuple[str, ...] = (),
              hooks: dict[str, Any] | None = None, keys: tuple[str, ...] = ()) -> type:
        """A model of this integration run by ``graph``: an integer key, ``group`` and
        ``order`` (reserved words; ``order`` the claim priority if ``priority``), with
        ``history`` ``state_history``, nullable time columns ``times``, text columns
        ``texts`` (nullable) and ``keys`` (NOT NULL, default ''), and ``hooks`` as class
        attributes (``stator_write_extra``...)."""
        if self.kind == "django":
            meta = type("Meta", (), {"apps": Apps(), "app_label": "driver_suite",
                                     "db_table": table})
            attrs: dict[str, Any] = {
                "__module__": __name__, "Meta": meta, "state_graph": graph,
                "id": models.IntegerField(primary_key=True),
                "group": models.CharField(max_length=20, null=True),
                "order": models.IntegerField(default=0, db_default=0),
            }
            if history:
                attrs["state_history"] = models.JSONField(null=True)
            attrs.update({name: StatorDateTimeField(null=True) for name in times})
            attrs.update({name: models.CharField(max_length=200, null=True) for name in texts})
            attrs.update({name: models.CharField(max_length=200, default="", db_default="")
                          for name in keys})
            base: tuple[type, ...] = (StatorModel,)
        else:

            class Base(DeclarativeBase):
                pass

            attrs = {
                "__tablename__": table, "state_graph": graph,
                "id": mapped_column(Integer, primary_key=True, autoincrement=False),
                "group": mapped_column("group", String(20), nullable=True),
                "order": mapped_column("order", Integer, default=0, server_default="0"),
            }
            if history:
                attrs["state_history"] = mapped_column(JSON, nullable=True)
            attrs.update({name: mapped_column(UTCDateTime(), nullable=True) for name in times})
            attrs.update({name: mapped_column(String(200), nullable=True) for name in texts})
            attrs.update({name: mapped_column(String(200), nullable=False, default="",
                                              server_default="") for name in keys})
            base = (StatorMixin, Base)
        if priority:
            attrs["stator_claim_priority"] = "order"
        attrs.update(hooks or {})
        return type("Row", base, attrs)

    def driver(self, *models: type, migrate: bool = True) -> Driver:
        """The driver over ``models``; with ``migrate``, their tables made as the integration
        makes them (Django: its migrations; SQLAlchemy: ``migrate``) and Stator's migrated."""
        if self.kind == "django":
            if migrate:
                with connections[self.target].schema_editor() as editor:
                    for model in models:
                        editor.create_model(model)
            stator = build_stator(models=list(models), clock=self.clock, alias=self.target)
        else:
            stator = Stator(self.target, list(models), clock=self.clock)
        self.stators.append(stator)
        if migrate:
            stator.migrate()
        store: Driver = stator.store
        return store

    def close(self) -> None:
        for stator in self.stators:
            stator.dispose()

    # -- the application's side ---------------------------------------------------------------

    @staticmethod
    def insert(driver: Driver, *rows: dict[str, Any], tracked: TrackedModel | None = None
               ) -> None:
        """Insert ``rows`` (column values; the rest from the columns' defaults)."""
        table = (tracked or driver.tracked[0]).table
        with driver.engine.begin() as conn:
            for row in rows:
                conn.execute(insert(table).values(**row))

    @staticmethod
    def row(driver: Driver, pk: Any, tracked: TrackedModel | None = None) -> dict[str, Any] | None:
        """Row ``pk`` as the database has it now (None if there is none)."""
        t = tracked or driver.tracked[0]
        with driver.engine.connect() as conn:
            found = conn.execute(select(t.table).where(t.table.c[t.pk] == pk)).first()
            conn.rollback()
        if found is None:
            return None
        values = dict(found._mapping)
        if isinstance(values.get("state_history"), str):  # Django's column type on SQLite
            values["state_history"] = json.loads(values["state_history"])
        return values

    @staticmethod
    def update(driver: Driver, pk: Any, **values: Any) -> None:
        t = driver.tracked[0]
        with driver.engine.begin() as conn:
            conn.execute(update(t.table).where(t.table.c[t.pk] == pk).values(**values))

    def other_connection(self) -> Any:
        """A connection of another session to the same database, in autocommit: psycopg's
        on PostgreSQL, sqlite3's on SQLite."""
        if self.postgresql:
            url = _pg_url(self.pg_database)
            return psycopg.connect(
                host=url.host, port=url.port or 5432, user=url.username,
                password=url.password, dbname=self.pg_database, autocommit=True,
                options=self.pg_options,
            )
        return sqlite3.connect(self.sqlite_file, isolation_level=None,
                               check_same_thread=False)
