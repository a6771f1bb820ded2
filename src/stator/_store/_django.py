"""The Django store: the engine's own SQL, run through Django's connections.

Not a second engine.  ``DjangoStore`` is ``Store`` with three parts swapped:

- **connections**: a SQLAlchemy ``Engine`` whose connection, in each thread, is that thread's
  Django connection (``connections[alias]``), lent to SQLAlchemy.  Every statement the engine
  runs (claims, fenced writes, heartbeats, status) is therefore the same SQL, built by
  ``_tracked.py``, on the connection Django itself would use, and a transaction Django opened
  (``atomic``, a ``TestCase``) stays Django's: statements join it, commits are left to it.
  Outside one, the engine begins its own (``BEGIN IMMEDIATE`` for writes on SQLite, whatever
  the project's ``transaction_mode``).
- **objects**: claimed rows become model instances through ``Model.from_db`` and the fields'
  own converters, as a queryset would make them.
- **handler transactions**: a sync handler runs inside ``transaction.atomic``; if it wrote,
  its fenced transition is written in that transaction and both commit (slow path),
  otherwise the transaction is rolled back and the transition joins a batch (fast path).

Application-side transitions (``transition_perform``) live in ``_django_moves.py``.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from sqlalchemy import URL, Column, Engine, MetaData, Table, create_engine, event, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import SingletonThreadPool
from sqlalchemy.types import UserDefinedType

from .. import _local_wakeups
from .._policy import Claimed, Write
from .._types import UTCDateTime
from ..django.fields import StatorDateTimeField
from ..errors import ConfigError
from . import _schema, _unreadable, _wake_sender
from ._dialects import BEGIN_OPTION, dialect_for, with_client_settings
from ._store import WRITE, Store, writer_lock
from ._tracked import TrackedModel
from .interface import Driver

# The begin mode of a claim (see ``django_engine``); SQLite claims take the write lock instead.
AUTOCOMMIT = "autocommit"
PREPARE_THRESHOLD = 5  # psycopg's default: a statement is prepared on its fifth use
POOL_THREADS = 1000  # SQLAlchemy's per-thread bookkeeping only; Django owns the connections
WRITE_PREFIXES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "SAVEPOINT", "CREATE", "DROP", "ALTER")


# -- which database ------------------------------------------------------------------------


def database_url(alias: str) -> URL:
    """The Django database as a URL: Stator's name for it in status output and wake-ups."""
    conn = connections[alias]
    s = conn.settings_dict
    if conn.vendor == "sqlite":
        return URL.create("sqlite", database=str(s["NAME"]))
    if conn.vendor == "postgresql":
        return URL.create(
            "postgresql+psycopg", username=s.get("USER") or None,
            password=s.get("PASSWORD") or None, host=s.get("HOST") or None,
            port=int(s["PORT"]) if s.get("PORT") else None, database=str(s["NAME"]),
        )
    raise ConfigError(f"Stator supports SQLite and PostgreSQL, not Django's {conn.vendor!r}")


def wake_key(alias: str) -> str:
    return _local_wakeups.key_for(database_url(alias))


# -- Django's connections, lent to SQLAlchemy ----------------------------------------------


class _Borrowed:
    """The calling thread's Django DB-API connection, as SQLAlchemy's pool sees it.

    Reconnects (through Django) when the connection was lost.  Inside a Django transaction
    ``commit``/``rollback`` do nothing: that transaction ends when Django's ``atomic`` does.
    ``close`` never closes: Django's connection is closed by its thread (``thread_done``).
    """

    def __init__(self, alias: str) -> None:
        self._django = connections[alias]
        # Unless the project chose a prepare threshold (``OPTIONS["prepare_threshold"]``, as
        # behind a transaction-pooling PgBouncer), the engine's own statements run with
        # server-side binding and psycopg's default threshold, so the fixed-shape claim and
        # write are prepared once per connection and not planned again on every call.
        options = self._django.settings_dict.get("OPTIONS") or {}
        self._prepares = self._django.vendor == "postgresql" and "prepare_threshold" not in options

    def _raw(self) -> Any:
        django = self._django
        raw = django.connection
        if raw is None or getattr(raw, "closed", False) or getattr(raw, "broken", False):
            if raw is not None:
                django.close()
            django.ensure_connection()
            raw = django.connection
        if self._prepares and getattr(raw, "prepare_threshold", 0) is None:
            # Django's own cursors bind on the client side and never prepare: only ours do.
            raw.prepare_threshold = PREPARE_THRESHOLD
        return raw

    def in_django_transaction(self) -> bool:
        return bool(self._django.in_atomic_block)

    def django_autocommit(self) -> bool:
        """Whether Django left the connection in autocommit (its default, outside ``atomic``
        and without ``AUTOCOMMIT: False``)."""
        self._raw()
        return bool(self._django.get_autocommit())

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        raw = self._raw()
        if self._prepares and not args and not kwargs:
            import psycopg  # Django's PostgreSQL backend runs on it (or on psycopg2)

            if isinstance(raw, psycopg.Connection):
                return psycopg.Cursor(raw)  # server-side binding: preparable (see __init__)
        return raw.cursor(*args, **kwargs)

    def commit(self) -> None:
        if not self.in_django_transaction():
            self._raw().commit()

    def rollback(self) -> None:
        if not self.in_django_transaction() and self._django.connection is not None:
            self._raw().rollback()

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw(), name)


def django_engine(alias: str) -> Engine:
    url = database_url(alias)
    # Nothing may register types on Django's connection (hstore's lookup also needs a real
    # psycopg object, not the borrowed one).
    extra = {"use_native_hstore": False} if url.get_backend_name() == "postgresql" else {}
    engine = create_engine(
        url, creator=lambda: _Borrowed(alias),
        poolclass=SingletonThreadPool, pool_size=POOL_THREADS, **extra,
    )
    sqlite = engine.dialect.name == "sqlite"

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        borrowed: _Borrowed = conn.connection.dbapi_connection
        if borrowed.in_django_transaction():
            return  # a Django atomic block (a handler's, a TestCase's): join it
        mode = conn.get_execution_options().get(BEGIN_OPTION, "deferred")
        if mode == AUTOCOMMIT and not sqlite and borrowed.django_autocommit():
            # A claim: one statement, atomic on its own.  Outside an atomic block Django
            # keeps psycopg in autocommit, so it runs as one round trip instead of three
            # (BEGIN, the UPDATE, COMMIT); the commit that follows finds nothing to do.
            return
        conn.exec_driver_sql("BEGIN IMMEDIATE" if sqlite and mode == "immediate" else "BEGIN")

    return engine


# -- the store -----------------------------------------------------------------------------


class _Sql(UserDefinedType[Any]):
    """A column type spelled as Django spells it (for the casts in the write statement)."""

    cache_ok = True

    def __init__(self, spec: str) -> None:
        self.spec = spec

    def get_col_spec(self, **_kw: Any) -> str:
        return self.spec


class DjangoStore(Store):
    migrate_hint = "run `manage.py migrate`"
    autocommit_writes = False  # Django's connections: their transactions are Django's

    def __init__(
        self, alias: str, models: Sequence[type], options: dict[str, Any] | None = None
    ) -> None:
        """``options`` reach each model's ``stator_claim_where(options)`` if it has one
        (``runstator --queue`` passes ``{"queues": [...]}``; None means all)."""
        self.alias = alias
        self.options = options or {}
        self.engine = django_engine(alias)
        self.dialect = dialect_for(self.engine)
        self._datetime = UTCDateTime()
        self._notify_limit = _wake_sender.NotifyLimit()
        self._writer = writer_lock(self.dialect)
        self.tracked = [self._track(m) for m in models]
        self._shapes: dict[str, _RowShape] = {}
        self._driver_sql: dict[str, str] = {}  # claim statements in psycopg's paramstyle

    def _track(self, model: Any) -> TrackedModel:
        opts = model._meta
        conn = connections[self.alias]
        # Stator's timestamps read and bind as the SQLAlchemy store's do (aware UTC; SQLite's
        # text spelt as StatorDateTimeField spells it), so the dashboard's row operations
        # (which the admin's actions use) fence and write them alike on both stores.
        columns = [
            Column(f.column, UTCDateTime() if isinstance(f, StatorDateTimeField)
                   else _Sql(f.db_type(conn) or "text"), primary_key=f.primary_key)
            for f in opts.concrete_fields
        ]
        table = Table(opts.db_table, MetaData(), *columns)
        hook = getattr(model, "stator_claim_where", None)
        return TrackedModel.from_table(
            model, table, opts.pk.attname, self.dialect, self.engine.dialect,
            where=hook(self.options) if hook is not None else None,
        )

    @property
    def wake_key(self) -> str:
        return wake_key(self.alias)

    def sqlite_path(self) -> str | None:
        conn = connections[self.alias]
        return None if conn.is_in_memory_db() else str(conn.settings_dict["NAME"])

    def listen_connection(self, listen_url: str | None = None) -> Any:
        if listen_url is not None:  # past a pooler: straight to the server
            return super().listen_connection(listen_url)
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

    def handler_scopes(self) -> Any:
        return DjangoScopes(self)

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
                    done.extend(self._install_notify(conn, tracked))
        return done

    def uninstall(self) -> list[str]:
        with self.engine.connect().execution_options(**WRITE) as conn, conn.begin():
            return _schema.uninstall(conn)

    @property
    def _claim_options(self) -> dict[str, Any]:
        """PostgreSQL: Django's own autocommit (see ``django_engine``), not SQLAlchemy's
        isolation level: the connection is Django's, lent for the claim."""
        if self.dialect.name == "postgresql":
            return {BEGIN_OPTION: AUTOCOMMIT}
        return WRITE

    def claim(
        self, tracked: TrackedModel, now: datetime, limit: int
    ) -> list[tuple[Any, Claimed]]:
        sql = tracked.sql.claim
        if sql is None or limit <= 0:
            return []
        params = self._claim_params(tracked, now, limit)
        if connections[self.alias].in_atomic_block:  # the caller's transaction: its errors
            return self._claim_rows(tracked, sql, params)
        return _unreadable.claim_setting_aside(
            self, tracked, now, params, lambda: self._claim_rows(tracked, sql, params)
        )

    def load_one(self, conn: Any, tracked: TrackedModel, key: Any) -> tuple[Any, Claimed]:
        row = conn.execute(text(
            f"SELECT {', '.join(tracked.quoted_columns)} FROM {tracked.quoted_table} "
            f"WHERE {tracked.quoted_pk} = :pk"
        ), {"pk": key}).one()
        return self._materialise(tracked, row)

    def _claim_rows(
        self, tracked: TrackedModel, sql: str, params: dict[str, Any]
    ) -> list[tuple[Any, Claimed]]:
        rows = self._claim_on_psycopg(tracked, sql, params)
        if rows is None:
            if connections[self.alias].in_atomic_block:
                sql = tracked.sql.claim_joined or sql
            with self._writer, self.engine.connect().execution_options(
                **self._claim_options
            ) as conn, conn.begin():
                rows = conn.execute(text(sql), params).all()
        return [self._materialise(tracked, row) for row in rows]

    def _claim_on_psycopg(
        self, tracked: TrackedModel, sql: str, params: dict[str, Any]
    ) -> Sequence[Sequence[Any]] | None:
        """PostgreSQL in Django's autocommit: the claim, one statement, straight on Django's
        psycopg connection; None where it must go through SQLAlchemy (SQLite, psycopg2, a
        Django transaction to join).  The same SQL and parameters, only less Python between
        a wake-up and the handler: an idle worker's pickup latency is mostly the claim's.
        Errors are raised as SQLAlchemy's, as the worker's retry policy expects."""
        django = connections[self.alias]
        if self.dialect.name != "postgresql" or django.in_atomic_block:
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

    def _materialise(self, tracked: TrackedModel, row: Sequence[Any]) -> tuple[Any, Claimed]:
        """A model instance as a queryset would build it, and the engine's view of the claim
        (from the raw values, so it does not depend on USE_TZ)."""
        shape = self._shapes.get(tracked.name)
        if shape is None:
            shape = self._shapes[tracked.name] = _RowShape(tracked, connections[self.alias])
        values = list(row)
        conn = connections[self.alias]
        for i, convert in shape.converters:
            values[i] = convert(values[i], None, conn)
        obj = tracked.model.from_db(self.alias, shape.attnames, values)  # type: ignore[attr-defined]
        when = self._datetime.process_result_value
        dialect = self.engine.dialect
        claimed = Claimed(
            pk=values[shape.pk], state=row[shape.state],
            state_changed=when(row[shape.state_changed], dialect),  # type: ignore[arg-type]
            lease_until=when(row[shape.state_next], dialect),  # type: ignore[arg-type]
            attempts=int(row[shape.state_attempts]),
        )
        if claimed.state_changed is None:  # Django's SQLite converters read garbage as None
            raise ValueError("state_changed does not hold a time")
        return obj, claimed


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
                self.converters.append((i, convert))
        columns = list(tracked.table.c.keys())
        self.pk = self.attnames.index(tracked.pk_attr)
        self.state = columns.index("state")
        self.state_changed = columns.index("state_changed")
        self.state_next = columns.index("state_next")
        self.state_attempts = columns.index("state_attempts")


# -- handler transactions ------------------------------------------------------------------


class DjangoScopes:
    def __init__(self, store: DjangoStore) -> None:
        self.alias = store.alias
        self.sqlite = store.dialect.name == "sqlite"
        self._local = threading.local()  # .keep: this thread may keep; .kept: the scope

    def for_thread(self, task: Any) -> Any:
        kept: AtomicScope | None = getattr(self._local, "kept", None)
        if kept is not None:
            self._local.kept = None
            return kept
        keep = self._park if getattr(self._local, "keep", False) else None
        return AtomicScope(self.alias, self.sqlite, keep)

    def keep_between_tasks(self) -> None:
        self._local.keep = True

    def settle(self) -> None:
        kept: AtomicScope | None = getattr(self._local, "kept", None)
        if kept is not None:
            self._local.kept = None
            kept.close()

    def _park(self, scope: AtomicScope) -> None:
        self._local.kept = scope

    def for_async(self, task: Any) -> Any:
        # The async ORM runs in a thread of its own: its writes cannot join a transaction
        # here, so async handlers always take the fast path.
        return _NoScope()


class _NoScope:
    def wrote(self) -> bool:
        return False

    def commit_with(
        self, store: Driver, tracked: TrackedModel, write: Write, worker_id: str
    ) -> bool:
        raise AssertionError("nothing to commit")

    def rollback(self) -> None:
        pass

    def release(self) -> None:
        pass


def _no_begin() -> None:
    """Stands in for Django's ``BEGIN`` at the start of a handler's atomic block on SQLite:
    the transaction begins (``BEGIN IMMEDIATE``) at the handler's first write instead, so
    its reads never hold a snapshot that a concurrent commit would make stale."""


class AtomicScope:
    """A handler's changes: whatever it writes on this thread's Django connection.

    Given ``keep`` (a handler thread's, see ``HandlerScopes.keep_between_tasks``), a scope
    that its handler left untouched is not closed but handed to ``keep``, still open, for the
    thread's next handler: a task that never touches the database then costs no atomic block
    of its own.  Untouched means no statement ran, so no database transaction is open (on
    PostgreSQL none begins before a statement; on SQLite none before the first write), and
    nothing was left for the commit: keeping the block open holds nothing in the database."""

    def __init__(
        self, alias: str, sqlite: bool, keep: Callable[[AtomicScope], None] | None = None
    ) -> None:
        self.alias = alias
        self.conn = connections[alias]
        self._keep = keep
        self._wrote = False
        self._ran = False  # any statement at all, through this connection's cursors
        self._lazy = sqlite and not self.conn.in_atomic_block
        if self._lazy:
            self.conn._start_transaction_under_autocommit = _no_begin
        self._atomic: Any = transaction.atomic(using=alias)
        self._atomic.__enter__()
        self._depth = len(self.conn.atomic_blocks)
        self._watch: Any = self.conn.execute_wrapper(self._observe)
        self._watch.__enter__()
        self._open = True

    def _observe(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self._ran = True
        if not self._wrote and sql.lstrip()[:10].upper().startswith(WRITE_PREFIXES):
            self._wrote = True
            if self._lazy:
                raw = self.conn.connection
                if not raw.in_transaction:
                    raw.execute("BEGIN IMMEDIATE")
        return execute(sql, params, many, context)

    def wrote(self) -> bool:
        """Wrote, or asked for something to run on commit (``transaction.on_commit``): then
        the transition commits with it, and the callback runs once both are committed."""
        return self._wrote or bool(self.conn.run_on_commit)

    def commit_with(
        self, store: Driver, tracked: TrackedModel, write: Write, worker_id: str
    ) -> bool:
        if self._lazy and not self.conn.connection.in_transaction:
            self.conn.connection.execute("BEGIN IMMEDIATE")
        with store.engine.connect() as conn:  # this thread's connection: inside the atomic
            lost = bool(store.write(tracked, [write], conn=conn, worker_id=worker_id))
        if lost:
            transaction.set_rollback(True, using=self.alias)
        self._close(None)
        return lost

    def rollback(self) -> None:
        if self._open:
            transaction.set_rollback(True, using=self.alias)
            self._close(None)

    def release(self) -> None:
        if self._open and self._keep is not None and self._untouched():
            self._keep(self)
            return
        self.rollback()

    def close(self) -> None:
        """Close a kept scope (it holds nothing to keep or undo)."""
        if self._open:
            self._close(None)

    def _untouched(self) -> bool:
        """Whether the handler left the block as it found it (see the class docstring)."""
        conn = self.conn
        return not (
            self._ran or conn.run_on_commit or conn.needs_rollback
            or conn.savepoint_ids or len(conn.atomic_blocks) != self._depth
            or conn.connection is None
        )

    def _close(self, exc: BaseException | None) -> None:
        self._open = False
        try:
            self._watch.__exit__(None, None, None)
            self._atomic.__exit__(None, None, None)
        finally:
            if self._lazy:
                with contextlib.suppress(AttributeError):
                    del self.conn._start_transaction_under_autocommit
