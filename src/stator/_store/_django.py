"""The Django driver: Stator's statements, run through Django's connections.

``DjangoStore`` implements ``interface.Driver`` beside the SQLAlchemy driver, not on top of
it.  It holds the same shared parts (``SqlOperations``, ``Bookkeeping``, ``SchemaKeeper``)
over an engine whose connection, in each thread, is that thread's Django connection
(``_django_connections.py``): every statement is the same SQL, on the connection Django
itself would use, and a transaction Django opened (``atomic``, a ``TestCase``) stays
Django's.  What is its own:

- **objects**: claimed rows become model instances as ``Model.from_db`` and the fields' own
  converters make them for a queryset (``_RowShape``; quicker where the result is the same,
  ``_django_rows.py``), or plain rows from the same converted values in a state with plain
  rows (``_plain_rows``); on PostgreSQL in Django's autocommit the claim runs straight on
  Django's psycopg connection;
- **handler transactions**: a sync handler runs inside ``transaction.atomic``
  (``_django_scopes.py``); if it wrote, its fenced transition is written in that
  transaction and both commit, otherwise the transition joins a batch (always, for a plain
  row's handler, which runs in no atomic block);
- **schema**: Django's migrations create the tables; ``migrate`` adds Stator's own tables and
  the wake-up triggers.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

from django.db import connections
from sqlalchemy import Column, MetaData, Table, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.types import UserDefinedType

from .._clock import Clock, SystemClock
from .._plain_rows import plain_row_builder
from .._policy import Claimed
from .._types import UTCDateTime
from ..django.fields import StatorDateTimeField
from . import _schema, _unreadable
from ._bookkeeping import Bookkeeping
from ._dialects import BEGIN_OPTION, dialect_for, listen_connection, with_client_settings
from ._django_connections import AUTOCOMMIT, _Borrowed, database_url, django_engine, wake_key
from ._django_rows import instance_maker, quick_converter, row_converter
from ._django_scopes import DjangoScopes
from ._migrate import SchemaKeeper
from ._operations import WRITE, SqlOperations
from ._shared_parts import SharedParts
from ._tracked import TrackedModel
from .interface import ClaimedRow, HandlerScopes

__all__ = ["DjangoStore", "database_url", "django_engine", "store_for", "wake_key"]

_DATETIME = UTCDateTime()  # reads a claimed row's times as the SQLAlchemy driver's do


class _Sql(UserDefinedType[Any]):
    """A column type spelled as Django spells it (for the casts in the write statement)."""

    cache_ok = True

    def __init__(self, spec: str) -> None:
        self.spec = spec

    def get_col_spec(self, **_kw: Any) -> str:
        return self.spec


class DjangoStore(SharedParts):
    """The Django driver (see the module docstring)."""

    migrate_hint = "run `manage.py migrate`"

    def __init__(
        self, alias: str, models: Sequence[type], options: dict[str, Any] | None = None,
        *, clock: Clock | None = None,
    ) -> None:
        """``options`` reach each model's ``stator_claim_where(options)`` if it has one
        (``runstator --queue`` passes ``{"queues": [...]}``; None means all)."""
        self.alias = alias
        self.clock: Clock = clock or SystemClock()
        self.options = options or {}
        self.engine = django_engine(alias)
        self.dialect = dialect_for(self.engine)
        self.tracked = [self._track(m) for m in models]
        # A claim is one statement: where the dialect allows, in Django's own autocommit (see
        # ``django_engine``), not SQLAlchemy's isolation level: the connection is Django's,
        # lent for the claim.  Write-backs keep their transaction: Django's connections.
        self.ops = SqlOperations(
            self, self.engine, self.dialect, self.tracked,
            claim_options=(
                {BEGIN_OPTION: AUTOCOMMIT} if self.dialect.autocommit_claims else WRITE
            ),
            autocommit_writes=False, clock=self.clock,
        )
        self.books = Bookkeeping(self.engine)
        self.schema = SchemaKeeper(
            self.engine, self.dialect, self.tracked, self.migrate_hint, self.clock)
        self._shapes: dict[str, _RowShape] = {}
        self._driver_sql: dict[str, str] = {}  # claim statements in psycopg's paramstyle
        self._texts: dict[str, Any] = {}  # claim statements as SQLAlchemy's ``text``

    def _track(self, model: Any) -> TrackedModel:
        opts = model._meta
        conn = connections[self.alias]
        # Stator's timestamps read and bind as the SQLAlchemy store's do (aware UTC; SQLite's
        # text spelt as StatorDateTimeField spells it), so the dashboard's row operations
        # (which the admin's actions use) fence and write them alike on both stores.
        columns = [
            Column(f.column, UTCDateTime() if isinstance(f, StatorDateTimeField)
                   else _Sql(f.db_type(conn) or "text"), primary_key=f.primary_key,
                   nullable=f.null)
            for f in opts.concrete_fields
        ]
        table = Table(opts.db_table, MetaData(), *columns)
        hook = getattr(model, "stator_claim_where", None)
        limits = getattr(model, "stator_claim_limits", None)
        return TrackedModel.from_table(
            model, table, opts.pk.attname, self.dialect, self.engine.dialect,
            where=hook(self.options) if hook is not None else None,
            limits=limits() if limits is not None else None,
        )

    # -- capability flags (see ``interface.Driver``) -----------------------------------------

    @property
    def listen_notify(self) -> bool:
        return self.dialect.listen_notify

    @property
    def skip_locked(self) -> bool:
        return bool(self.dialect.skip_locked)

    @property
    def one_statement_writes(self) -> bool:
        return self.ops.one_statement_writes

    @property
    def row_by_row_writes(self) -> bool:
        return self.dialect.row_by_row_writes

    # -- connections, wake-ups, handler transactions -----------------------------------------

    @property
    def wake_key(self) -> str:
        return wake_key(self.alias)

    def send_notification(self, payload: str) -> None:
        self.ops.send_notification(payload)

    def sqlite_path(self) -> str | None:
        if not self.dialect.single_writer:  # not a file (is_in_memory_db is SQLite's alone)
            return None
        conn = connections[self.alias]
        return None if conn.is_in_memory_db() else str(conn.settings_dict["NAME"])

    def listen_connection(self, listen_url: str | None = None) -> Any:
        if listen_url is not None:  # past a pooler: straight to the server
            return listen_connection(self.engine, listen_url)
        import psycopg

        params = connections[self.alias].get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        params.pop("server_side_binding", None)
        return psycopg.connect(**with_client_settings(params), autocommit=True)

    def sqlite_connection(self, conn: Any) -> sqlite3.Connection | None:
        # Django lends its connection wrapped (``_Borrowed``): the sqlite3 one is inside.
        borrowed = conn.connection.dbapi_connection
        raw = borrowed._raw() if isinstance(borrowed, _Borrowed) else borrowed
        return raw if isinstance(raw, sqlite3.Connection) else None

    def handler_scopes(self) -> HandlerScopes:
        return DjangoScopes(self, self.alias)

    def thread_done(self) -> None:
        connections[self.alias].close()

    async def loop_done(self) -> None:
        # The async ORM runs its queries in a thread of asgiref's (one for the process: no
        # async_to_sync above the loop), where Django keeps a connection of its own: closed
        # with the loop, as a worker thread's is with its thread.
        from asgiref.sync import sync_to_async

        await sync_to_async(self.thread_done)()

    async def after_async_error(self) -> None:
        # The error may have come from that connection dying (a restarted server, a failover).
        # Outside a request nothing else would ever drop it, and every later async handler
        # would fail on it: Django's own check closes it if it is no longer usable.
        from asgiref.sync import sync_to_async

        await sync_to_async(self._drop_if_broken)()

    def _drop_if_broken(self) -> None:
        # Looked up here, in asgiref's thread: that thread's connection, not the caller's.
        connections[self.alias].close_if_unusable_or_obsolete()

    def migrate(self) -> list[str]:
        """Stator's own tables and the wake-up triggers; the models' tables are Django's."""
        done: list[str] = []
        with self.engine.connect().execution_options(**WRITE) as conn, conn.begin():
            if _schema.upgrade(conn):
                done.append(f"stator schema upgraded to version {_schema.SCHEMA_VERSION}")
            tables = set(connections[self.alias].introspection.table_names())
            for tracked in self.tracked:
                if tracked.table.name in tables:
                    done.extend(self.schema.install_notify(conn, tracked))
        return done

    # -- claims --------------------------------------------------------------------------

    def claim(
        self, tracked: TrackedModel, now: datetime, limit: int
    ) -> list[ClaimedRow]:
        sql = tracked.sql.claim
        if sql is None or limit <= 0:
            return []
        params = self.ops.claim_params(tracked, now, limit)
        if connections[self.alias].in_atomic_block:  # the caller's transaction: its errors
            return self._claim_rows(tracked, sql, params)
        return _unreadable.claim_setting_aside(
            self.ops, tracked, now, params, lambda: self._claim_rows(tracked, sql, params)
        )

    def load_one(self, conn: Any, tracked: TrackedModel, key: Any) -> ClaimedRow:
        row = conn.execute(text(
            f"SELECT {', '.join(tracked.quoted_columns)} FROM {tracked.quoted_table} "
            f"WHERE {tracked.quoted_pk} = :pk"
        ), {"pk": key}).one()
        return self._materialise(tracked, row)

    def _claim_rows(
        self, tracked: TrackedModel, sql: str, params: dict[str, Any]
    ) -> list[ClaimedRow]:
        rows = self._claim_on_psycopg(tracked, sql, params)
        if rows is None:
            if connections[self.alias].in_atomic_block:
                sql = tracked.sql.claim_joined or sql
            rows = self.ops.run_claim(self._text(sql), params, tracked.sql.claim_lock)
        self.ops.claimed(tracked, rows)
        shape, conn = self._shape(tracked), connections[self.alias]  # once, not per row
        return [self._materialise(tracked, row, shape, conn) for row in rows]

    def _text(self, sql: str) -> Any:
        """``text(sql)``, made once per statement: parsing a claim's text for its
        parameters cost as much as a row of the claim."""
        clause = self._texts.get(sql)
        if clause is None:
            clause = self._texts[sql] = text(sql)
        return clause

    def _claim_on_psycopg(
        self, tracked: TrackedModel, sql: str, params: dict[str, Any]
    ) -> Sequence[Sequence[Any]] | None:
        """PostgreSQL in Django's autocommit: the claim, one statement, straight on Django's
        psycopg connection; None where it must go through SQLAlchemy (SQLite, psycopg2, a
        Django transaction to join).  The same SQL and parameters, only less Python between
        a wake-up and the handler: an idle worker's pickup latency is mostly the claim's.
        Errors are raised as SQLAlchemy's, as the worker's retry policy expects."""
        django = connections[self.alias]
        if (not self.dialect.autocommit_claims or django.in_atomic_block
                or tracked.sql.claim_lock is not None):
            return None
        borrowed = _Borrowed(self.alias)
        raw = borrowed._raw()
        import psycopg

        if not isinstance(raw, psycopg.Connection) or not django.get_autocommit():
            return None
        statement = self._driver_sql.get(tracked.name)
        if statement is None:
            compiled = text(sql).compile(dialect=self.engine.dialect)
            statement = self._driver_sql[tracked.name] = str(compiled)
        cursor = borrowed.cursor()
        try:
            return list(cursor.execute(statement, params).fetchall())
        except psycopg.Error as exc:
            raise DBAPIError.instance(
                statement, params, exc, psycopg.Error, connection_invalidated=raw.broken,
            ) from exc
        finally:
            cursor.close()

    def _shape(self, tracked: TrackedModel) -> _RowShape:
        shape = self._shapes.get(tracked.name)
        if shape is None:
            shape = self._shapes[tracked.name] = _RowShape(tracked, connections[self.alias])
        return shape

    def _materialise(
        self, tracked: TrackedModel, row: Sequence[Any], shape: _RowShape | None = None,
        conn: Any = None,
    ) -> ClaimedRow:
        """A model instance as a queryset would build it, and the engine's view of the claim
        (from the raw values, so it does not depend on USE_TZ).  ``shape`` and ``conn`` (this
        thread's Django connection: an ``asgiref`` local's lookup) are looked up once per
        claim by the caller, or here."""
        shape = shape or self._shape(tracked)
        conn = conn or connections[self.alias]
        values = list(row)
        shape.convert(values, conn)
        if shape.plain is not None and row[shape.state] in tracked.plain_states:
            obj = shape.plain(values)  # no from_db, no model signals: see ``_plain_rows``
        else:
            obj = shape.instance(values)
        claimed = Claimed(
            pk=values[shape.pk], state=row[shape.state],
            state_changed=self._utc(row, values, shape.state_changed),  # type: ignore[arg-type]
            lease_until=self._utc(row, values, shape.state_next),  # type: ignore[arg-type]
            attempts=int(row[shape.state_attempts]),
        )
        if claimed.state_changed is None:  # Django's SQLite converters read garbage as None
            raise ValueError("state_changed does not hold a time")
        return obj, claimed


    def _utc(self, row: Sequence[Any], values: list[Any], i: int) -> datetime | None:
        """Column ``i`` of a claimed row read as the SQLAlchemy driver reads it (aware UTC,
        from the raw value): the field's converted value when the raw one was a time already
        and the converter left it, or made it, aware UTC (``USE_TZ``, the connection in UTC:
        the usual case), since that is the same value."""
        raw, value = row[i], values[i]
        if type(raw) is datetime and type(value) is datetime and value.tzinfo is UTC:
            return value  # raw.replace(tzinfo=UTC), as both made it
        return _DATETIME.process_result_value(raw, self.engine.dialect)


@functools.lru_cache(maxsize=64)
def store_for(alias: str, model: type) -> tuple[DjangoStore, TrackedModel]:
    """A driver for one model, for what runs outside a worker (application code's moves, the
    admin's actions): built once per database and model, since it costs a little SQL
    compilation."""
    store = DjangoStore(alias, [model])
    return store, store.tracked[0]


class _RowShape:
    """Where a claimed row's values go: worked out once per model, since a claim builds an
    instance per row (the converters of the columns that have any, in column order)."""

    def __init__(self, tracked: TrackedModel, conn: Any) -> None:
        model: Any = tracked.model
        fields = model._meta.concrete_fields
        self.attnames = [f.attname for f in fields]
        self.converters: list[tuple[int, Callable[..., Any]]] = []
        for i, field in enumerate(fields):
            col = field.get_col(model._meta.db_table)
            for convert in conn.ops.get_db_converters(col) + col.get_db_converters(conn):
                self.converters.append((i, quick_converter(convert, field)))
        self.convert = row_converter(self.converters)  # all of a row's, in one call
        columns = list(tracked.table.c.keys())
        self.pk = self.attnames.index(tracked.pk_attr)
        self.state = columns.index("state")
        self.state_changed = columns.index("state_changed")
        self.state_next = columns.index("state_next")
        self.state_attempts = columns.index("state_attempts")
        self.instance = instance_maker(model, conn.alias, self.attnames)  # ``from_db``'s
        # Plain rows (``_plain_rows``) have the fields' attnames, and ``pk`` as instances do.
        pk = {} if "pk" in self.attnames else {"pk": property(attrgetter(self.attnames[self.pk]))}
        self.plain = (
            plain_row_builder(model, self.attnames, pk) if tracked.plain_states else None
        )
