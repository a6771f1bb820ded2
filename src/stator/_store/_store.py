"""The SQLAlchemy driver: Stator over an application's SQLAlchemy engine and ORM models.

``Store`` implements ``interface.Driver``.  The SQL and the bookkeeping it shares with the
Django driver are parts it holds (``SqlOperations``, ``Bookkeeping``, ``SchemaKeeper``); what
is its own is here: how a claimed row becomes a detached ORM object (``_Loader``), handler
sessions (``_sessions.py``), the connection LISTEN runs on, and a ``migrate`` that also
creates the tracked tables and their Stator columns.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, inspect, select, text
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session, configure_mappers
from sqlalchemy.orm.attributes import instance_state

from .. import _local_wakeups
from .._clock import Clock, SystemClock
from .._plain_rows import plain_row_builder
from .._policy import Claimed
from . import _unreadable
from ._bookkeeping import Bookkeeping
from ._dialects import SqlDialect, dialect_for, listen_connection
from ._migrate import SchemaKeeper
from ._operations import WRITE, SqlOperations
from ._raw_claim import RawClaim
from ._sessions import SessionScopes
from ._shared_parts import SharedParts
from ._tracked import TrackedModel
from .interface import ClaimedRow, HandlerScopes

MIGRATE_HINT = "run `stator migrate APP` (or Stator.migrate())"


class Store(SharedParts):
    """The SQLAlchemy driver (see the module docstring)."""

    migrate_hint = MIGRATE_HINT

    def __init__(
        self, engine: Engine, models: Sequence[type], *, clock: Clock | None = None
    ) -> None:
        self.engine = engine
        self.clock: Clock = clock or SystemClock()
        self.dialect: SqlDialect = dialect_for(engine)
        self.tracked = [TrackedModel.build(m, self.dialect, engine.dialect) for m in models]
        self.dialect.configure(
            engine,
            [s.timeout for t in self.tracked for s in t.graph.states.values() if s.automatic],
        )
        # A claim is one statement, atomic on its own: where the dialect allows it, it runs
        # in autocommit, one round trip instead of three (BEGIN, the UPDATE, COMMIT), which
        # is what a claim costs on a link with latency; else as a write transaction.  The
        # same for a plain batch's write-back (``one_statement_writes``), its NOTIFY folded in.
        self.ops = SqlOperations(
            self, engine, self.dialect, self.tracked,
            claim_options=(
                {"isolation_level": "AUTOCOMMIT"} if self.dialect.autocommit_claims else WRITE
            ),
            autocommit_writes=True, clock=self.clock,
        )
        self.books = Bookkeeping(engine)
        self.schema = SchemaKeeper(
            engine, self.dialect, self.tracked, self.migrate_hint, self.clock)
        self._loaders: dict[str, _Loader] = {}

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

    # -- connections, wake-ups, handler sessions -------------------------------------------

    @property
    def wake_key(self) -> str:
        return _local_wakeups.key_for(self.engine.url)

    def sqlite_path(self) -> str | None:
        return self.engine.url.database if self.dialect.single_writer else None

    def sqlite_connection(self, conn: Connection) -> sqlite3.Connection | None:
        raw = conn.connection.dbapi_connection
        return raw if isinstance(raw, sqlite3.Connection) else None

    def listen_connection(self, listen_url: str | None = None) -> Any:
        return listen_connection(self.engine, listen_url)

    def send_notification(self, payload: str) -> None:
        self.ops.send_notification(payload)

    def handler_scopes(self) -> HandlerScopes:
        return SessionScopes(self)

    def thread_done(self) -> None:
        """The pool keeps each thread's connection: nothing to drop."""

    async def loop_done(self) -> None:
        pass

    async def after_async_error(self) -> None:
        pass

    # -- schema ----------------------------------------------------------------------------

    def migrate(self) -> list[str]:
        """Stator's tables, the tracked tables and their Stator columns; idempotent."""
        return self.schema.migrate()

    # -- the hot path ----------------------------------------------------------------------

    def claim(
        self, tracked: TrackedModel, now: datetime, limit: int
    ) -> list[ClaimedRow]:
        """Lease up to ``limit`` due rows; returns (ORM object, claim) pairs, objects detached.
        Rows that cannot be read are recorded as errors and set aside (``_unreadable``)."""
        sql = tracked.sql.claim
        if sql is None or limit <= 0:
            return []
        params = self.ops.claim_params(tracked, now, limit)
        return _unreadable.claim_setting_aside(
            self.ops, tracked, now, params, lambda: self._claim_rows(tracked, sql, params)
        )

    def _loader(self, tracked: TrackedModel) -> _Loader:
        loader = self._loaders.get(tracked.name)
        if loader is None:
            loader = self._loaders[tracked.name] = _Loader(
                tracked, tracked.sql.claim or "", self.engine.dialect)
        return loader

    def load_one(self, conn: Connection, tracked: TrackedModel, key: Any) -> ClaimedRow:
        """Row ``key`` loaded as a claim loads it (raises what the claim would raise)."""
        loader = self._loader(tracked)
        return loader.load(conn.execute(loader.one, {"pk": key}).one())

    def _claim_rows(
        self, tracked: TrackedModel, sql: str, params: dict[str, Any]
    ) -> list[ClaimedRow]:
        loader = self._loader(tracked)
        if not loader.fast:
            return self._claim_orm(tracked, sql, params)
        rows = self.ops.run_claim(loader.statement, params, tracked.sql.claim_lock, loader.raw)
        self.ops.claimed(tracked, rows)
        load = loader.load
        return [load(row) for row in rows]

    def _claim_orm(
        self, tracked: TrackedModel, sql: str, params: dict[str, Any]
    ) -> list[ClaimedRow]:
        """The ORM's own loading, for models whose load events must run (a reconstructor)."""
        statement = select(tracked.model).from_statement(text(sql).columns(*tracked.table.c))
        with Session(self.engine, expire_on_commit=False, autoflush=False) as session:
            conn = session.connection(execution_options=WRITE)
            if tracked.sql.claim_lock is not None:
                conn.execute(text(tracked.sql.claim_lock))
            objects = list(session.scalars(statement, params))
            session.commit()
            session.expunge_all()
        loader = self._loader(tracked)
        rows = [[getattr(obj, k) for k in loader.keys] for obj in objects]
        self.ops.claimed(tracked, rows)
        return [(loader.plain_or(obj, row), _claimed(obj, tracked))
                for obj, row in zip(objects, rows, strict=True)]

class _Loader:
    """Turns claimed rows into detached ORM objects without the ORM's loading machinery.

    Loading 100 rows through ``select(model).from_statement`` (identity map, a session, then
    ``expunge_all``) cost about a third of the worker's claim time; a claimed row is
    only ever handed to one handler, so none of that bookkeeping buys anything here.  The
    object is built as the ORM builds a loaded one: ``__new__`` plus instance state, the
    column values put straight into its ``__dict__`` (no change events), then marked as
    persistent-but-detached by its identity key, exactly what the handler's session
    expects to ``add``.  Models with load listeners (a
    ``@reconstructor``) go through the ORM instead, so their hooks still run.

    A row in a state with plain rows becomes a plain row (``_plain_rows``) instead: the same
    values (the claim's result processors already convert them as the ORM would), no
    instance state, nothing to attach.
    """

    def __init__(
        self, tracked: TrackedModel, sql: str, dialect: Dialect) -> None:
        configure_mappers()  # the attribute machinery the objects need must exist
        mapper: Any = inspect(tracked.model)
        self.manager = mapper.class_manager
        self.fast = not self.manager.dispatch.load and not self.manager.dispatch.refresh
        self.statement = text(sql).columns(*tracked.table.c)
        # The same claim on the DB-API cursor (``_raw_claim``) where the driver allows it.
        self.raw = RawClaim.build(sql, list(tracked.table.c), dialect,
                                  list(tracked.table.c.keys()).index("state_next"))
        self.one = text(
            f"SELECT {', '.join(tracked.quoted_columns)} FROM {tracked.quoted_table} "
            f"WHERE {tracked.quoted_pk} = :pk"
        ).columns(*tracked.table.c)
        self.mapper = mapper
        names = list(tracked.table.c.keys())
        self.keys = [mapper.get_property_by_column(c).key for c in tracked.table.c]
        self.pk, self.state = names.index(tracked.pk), names.index("state")
        self.changed, self.lease = names.index("state_changed"), names.index("state_next")
        self.attempts = names.index("state_attempts")
        self.plain_states = tracked.plain_states
        self.plain = plain_row_builder(tracked.model, self.keys) if self.plain_states else None

    def load(self, row: Sequence[Any]) -> tuple[Any, Claimed]:
        claimed = Claimed(
            pk=row[self.pk], state=row[self.state], state_changed=row[self.changed],
            lease_until=row[self.lease], attempts=_attempts(row[self.attempts]),
        )
        if self.plain is not None and claimed.state in self.plain_states:
            return self.plain(row), claimed
        obj = self.manager.new_instance()
        obj.__dict__.update(zip(self.keys, row, strict=True))
        # What ``make_transient_to_detached`` does to a fresh object, without its general
        # case (reading the key back through the attribute machinery, clearing a history
        # that a fresh object does not have): an identity key makes it detached.
        instance_state(obj).key = self.mapper.identity_key_from_primary_key([row[self.pk]])
        return obj, claimed

    def plain_or(self, obj: Any, row: Sequence[Any]) -> Any:
        """An object the ORM loaded, or its plain row if its state has plain rows."""
        if self.plain is not None and row[self.state] in self.plain_states:
            return self.plain(row)
        return obj


def _claimed(obj: Any, tracked: TrackedModel) -> Claimed:
    return Claimed(
        pk=getattr(obj, tracked.pk_attr), state=obj.state, state_changed=obj.state_changed,
        lease_until=obj.state_next, attempts=_attempts(obj.state_attempts),
    )


def _attempts(value: Any) -> int:
    """``state_attempts`` as read (SQLite keeps whatever text was written there)."""
    if type(value) is not int:
        raise ValueError(f"state_attempts holds {value!r}, not a number")
    return value
