"""The driver interface: every operation the engine asks of a database, by name.

The engine (the worker's threads, ``Executor``, the ``Stator`` facade) holds a ``Driver`` and
nothing more concrete, so a driver is whatever implements these methods: the SQLAlchemy
driver (``Store``) and the Django one (``DjangoStore``) are two, and the conformance suite
(``tests/driver/``) runs the same tests against each.  Naming every operation here is what
lets each be tested once per driver, and lets a driver change how it talks to its database
without the engine noticing.

A driver also says what its database can do, as capability flags: the engine branches on a
flag, never on a database's name, so a difference between databases is decided in one place
(``SqlDialect``) and read everywhere else.

Both drivers run their statements through an SQLAlchemy ``Engine`` (Django's lends its own
connections to one), so ``engine``, ``dialect`` and ``tracked`` are part of the interface too:
the operator's reads (``_dashboard``) are written once against them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from sqlalchemy import Connection, Engine

from .._clock import Clock
from .._policy import Claimed, Write
from ._dialects import SqlDialect
from ._records import EdgeCount, Heartbeat, StatsPeriod
from ._tracked import TrackedModel

if TYPE_CHECKING:  # what the readers get back: a worker never imports them
    from ._read_records import ErrorRecord, ModelStats, StateCount, WorkerRecord

# The name a write's failures are recorded under when no worker wrote it (``run_once``).
INLINE = "inline"

ClaimedRow = tuple[Any, Claimed]
"""A claimed row: the application's object (detached, ready for a handler) and the engine's
view of the claim (what the fence of its write-back compares with)."""

WriteGroup = tuple[TrackedModel, Sequence[Write]]
"""One model's writes of a batch (``write_all`` writes several models' in one go)."""


class DueDepth(NamedTuple):
    """How far behind one model is: rows due now and how late the oldest of them is."""

    rows: int
    late_seconds: float


class ClaimedTask(Protocol):
    """What a handler scope needs of the task it is opened for: the row's object, which the
    handler's own changes are made to."""

    @property
    def obj(self) -> Any: ...


class HandlerScope(Protocol):
    """Where a handler's own database changes go, so they commit with its transition.

    One implementation per driver: an ORM session (SQLAlchemy) or a transaction on the
    thread's connection (Django).  ``wrote`` decides between the slow path (commit the
    handler's changes with the fenced write, in ``commit_with``) and the fast path (the write
    joins a batch).
    """

    def wrote(self) -> bool: ...

    def commit_with(
        self, store: Driver, tracked: TrackedModel, write: Write, worker_id: str
    ) -> bool:
        """Apply the fenced write in the handler's transaction and commit both; True (and
        everything rolled back) when the fence no longer held.  ``worker_id`` names the
        writer in the failure it records."""
        ...

    def rollback(self) -> None: ...

    def release(self) -> None: ...


class HandlerScopes(Protocol):
    """Hands each handler run its ``HandlerScope`` (one object per ``Executor``)."""

    def for_thread(self, task: ClaimedTask) -> HandlerScope:
        """Opened in the handler's thread just before a sync handler runs."""
        ...

    def for_async(self, task: ClaimedTask) -> HandlerScope: ...

    def keep_between_tasks(self) -> None:
        """This thread runs sync handlers one after another and calls ``settle`` before it
        waits for more or ends: a scope its last handler left untouched (no statement, no
        callback) may stay open for the next one, which spares opening and closing it."""
        ...

    def settle(self) -> None:
        """Close the scope this thread kept open, if any."""
        ...


class Driver(Protocol):
    """One database as the engine uses it.  Every method may be called from any of the
    worker's threads; a driver keeps per-thread state (connections) itself and drops it in
    ``thread_done``."""

    # -- what it is --------------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine its statements run on (Django's: over Django's connections)."""
        ...

    @property
    def dialect(self) -> SqlDialect:
        """Every SQL difference between the databases, for the statements built elsewhere."""
        ...

    @property
    def tracked(self) -> list[TrackedModel]:
        """The models it runs, each with its graph and statements."""
        ...

    @property
    def clock(self) -> Clock:
        """Where the driver's own times come from (a row set aside, columns added to
        existing rows), the same clock as the engine's: time is injected, never asked for."""
        ...

    @property
    def migrate_hint(self) -> str:
        """How a user creates or upgrades the schema, for the messages that ask them to."""
        ...

    # -- capability flags --------------------------------------------------------------------

    @property
    def listen_notify(self) -> bool:
        """Wake-ups from other processes arrive by LISTEN/NOTIFY on ``listen_connection``
        (PostgreSQL).  Without it the listener watches ``sqlite_path`` for commits instead."""
        ...

    @property
    def skip_locked(self) -> bool:
        """The claim passes by rows that another session holds locked, so ``next_due`` can
        leave them out too (``claimable_at``); without it a locked row makes the claim wait."""
        ...

    @property
    def one_statement_writes(self) -> bool:
        """A batch of one model's plain moves (or deletes) is written as one autocommit
        statement, the wake-up folded in: one round trip instead of four."""
        ...

    @property
    def row_by_row_writes(self) -> bool:
        """Fenced writes run once per row on the DB-API connection (SQLite: in-process, so a
        statement per row costs no round trip and less CPU than unpacking one JSON batch)."""
        ...

    # -- the hot path ------------------------------------------------------------------------

    def claim(self, tracked: TrackedModel, now: datetime, limit: int) -> list[ClaimedRow]:
        """Lease up to ``limit`` due rows of ``tracked``; rows that cannot be read are
        recorded as errors and set aside, never returned."""
        ...

    def load_one(self, conn: Connection, tracked: TrackedModel, key: Any) -> ClaimedRow:
        """Row ``key`` loaded as a claim loads it (raises what the claim would raise): how an
        unreadable row of a claim is told from its readable neighbours."""
        ...

    def write(
        self, tracked: TrackedModel, writes: Sequence[Write], conn: Connection | None = None,
        worker_id: str = INLINE,
    ) -> set[Any]:
        """Apply fenced writes (on ``conn``, inside its transaction, if given); returns the
        primary keys whose fence no longer held."""
        ...

    def write_all(
        self, groups: Sequence[WriteGroup], worker_id: str = INLINE
    ) -> dict[str, set[Any]]:
        """Apply every model's writes in one transaction; lost primary keys per model."""
        ...

    def next_due(
        self, tracked: Iterable[TrackedModel], claimable_at: datetime | None = None
    ) -> datetime | None:
        """The earliest time any row of these models needs the engine (leases included);
        with ``claimable_at`` (and ``skip_locked``), rows locked by another session then are
        left out."""
        ...

    def due_depth(
        self, tracked: Iterable[TrackedModel], now: datetime
    ) -> dict[str, DueDepth]:
        """Per model: how many rows are due now and how late the oldest is."""
        ...

    # -- workers, stats, status --------------------------------------------------------------

    def heartbeat(self, beat: Heartbeat) -> None:
        """Record that this worker is alive (its row in the workers table)."""
        ...

    def forget_worker(self, worker_id: str) -> None:
        """Remove a worker's row as it stops."""
        ...

    def record_stats(
        self, periods: Sequence[StatsPeriod], prune_before: datetime,
        edges: Sequence[EdgeCount] = (),
    ) -> None:
        """One stats period per model and per edge; older stats, errors and workers pruned."""
        ...

    def state_counts(self, now: datetime) -> list[StateCount]:
        """Per model and state: rows, due now, oldest due time, rows failing."""
        ...

    def recent_stats(self, since: datetime) -> list[ModelStats]:
        """Per model, the stats periods since ``since`` summed."""
        ...

    def recent_errors(
        self, limit: int = 20, models: Sequence[str] | None = None
    ) -> list[ErrorRecord]:
        """The newest recorded failures (of ``models`` only, if given)."""
        ...

    def workers(self, models: Sequence[str] | None = None) -> list[WorkerRecord]:
        """Workers that run any of ``models`` (all if not given)."""
        ...

    # -- schema ------------------------------------------------------------------------------

    def migrate(self) -> list[str]:
        """Create or upgrade what the driver owns of the schema; idempotent; what it did."""
        ...

    def uninstall(self, then: Callable[[Connection], None] | None = None) -> list[str]:
        """Drop Stator's own tables (never the application's tables or their Stator columns);
        ``then(conn)`` runs in the same transaction once any was dropped (the launcher's
        ``restart``); what it did."""
        ...

    def problems(self) -> list[str]:
        """Why the database is not ready to be run, each with its fix; empty when ready."""
        ...

    def check_ready(self) -> None:
        """Raise ``SchemaError`` naming the fix unless ``problems`` is empty."""
        ...

    # -- wake-ups ----------------------------------------------------------------------------

    @property
    def wake_key(self) -> str:
        """The in-process wake-up channel of this database (``_local_wakeups``)."""
        ...

    def send_notification(self, payload: str) -> None:
        """A notification on the wake-up channel (the listener's check that they arrive);
        nothing where there is no ``listen_notify``."""
        ...

    def listen_connection(self, listen_url: str | None = None) -> Any:
        """A psycopg connection of its own, in autocommit, for LISTEN (``listen_notify``):
        to ``listen_url`` if given (past a pooler), else to the driver's database."""
        ...

    def sqlite_path(self) -> str | None:
        """The SQLite file whose commits the listener watches; None for other databases or
        an in-memory one."""
        ...

    def sqlite_connection(self, conn: Connection) -> Any:
        """The sqlite3 connection under ``conn`` (for statements run row by row); None on
        other databases."""
        ...

    # -- handler transactions and threads ----------------------------------------------------

    def handler_scopes(self) -> HandlerScopes:
        """How handlers' own changes are held and committed with their transitions."""
        ...

    def thread_done(self) -> None:
        """Called by each worker thread as it ends (drops its connection, if the driver keeps
        one per thread)."""
        ...

    async def loop_done(self) -> None:
        """Awaited on an event loop that ran async handlers, as it ends."""
        ...

    async def after_async_error(self) -> None:
        """Awaited after an async handler raised, on the loop that ran it."""
        ...
