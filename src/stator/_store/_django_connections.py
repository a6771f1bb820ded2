"""Django's connections, lent to SQLAlchemy: the Django driver's engine.

In each thread the engine's connection is that thread's Django connection
(``connections[alias]``), so the driver's statements join a transaction Django opened and
leave its commits to Django; outside one, the engine begins its own.
"""

from __future__ import annotations

from typing import Any

from django.db import connections
from sqlalchemy import URL, Engine, create_engine, event
from sqlalchemy.pool import SingletonThreadPool

from .. import _local_wakeups
from ..errors import ConfigError
from ._dialects import BEGIN_OPTION, dialect_for
from ._dialects._postgres import binary_times

# The begin mode of a claim (see ``django_engine``); SQLite claims take the write lock instead.
AUTOCOMMIT = "autocommit"
PREPARE_THRESHOLD = 5  # psycopg's default: a statement is prepared on its fifth use
POOL_THREADS = 1000  # SQLAlchemy's per-thread bookkeeping only; Django owns the connections


# -- which database ------------------------------------------------------------------------


def database_url(alias: str) -> URL:
    """The Django database as a URL: Stator's name for it in status output and wake-ups."""
    conn = connections[alias]
    try:
        dialect = dialect_for(conn.vendor)
    except ConfigError:
        raise ConfigError(
            f"Stator supports SQLite and PostgreSQL, not Django's {conn.vendor!r}"
        ) from None
    return dialect.url_from_django(conn.settings_dict)


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
        self._prepares = (
            dialect_for(self._django.vendor).server_prepares and "prepare_threshold" not in options
        )

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
            binary_times(raw.adapters)  # a fresh connection: the write's times in binary
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
    dialect = dialect_for(url.get_backend_name())
    engine = create_engine(
        url, creator=lambda: _Borrowed(alias),
        poolclass=SingletonThreadPool, pool_size=POOL_THREADS, **dialect.lent_engine_options,
    )
    single_writer = dialect.single_writer

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        borrowed: _Borrowed = conn.connection.dbapi_connection
        if borrowed.in_django_transaction():
            return  # a Django atomic block (a handler's, a TestCase's): join it
        mode = conn.get_execution_options().get(BEGIN_OPTION, "deferred")
        if mode == AUTOCOMMIT and dialect.autocommit_claims and borrowed.django_autocommit():
            # A claim: one statement, atomic on its own.  Outside an atomic block Django
            # keeps psycopg in autocommit, so it runs as one round trip instead of three
            # (BEGIN, the UPDATE, COMMIT); the commit that follows finds nothing to do.
            return
        immediate = single_writer and mode == "immediate"
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine
