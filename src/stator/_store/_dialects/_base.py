"""The questions every database answers, with the answers most databases give.

A database Stator does not run on (another of a Django project's databases) gets these
answers unchanged; SQLite and PostgreSQL override what differs (``_sqlite``, ``_postgres``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._time_text import TimeTexts

# SQLAlchemy is imported where it runs: Django's fields ask a dialect how to spell a time
# while apps load, and must not bring in the toolkit (a quarter of a second) to do so.
if TYPE_CHECKING:
    from sqlalchemy import URL, Engine
    from sqlalchemy.types import TypeEngine

NOTIFY_CHANNEL = "stator"


class SqlDialect:
    name = "generic"
    skip_locked = ""
    # Capabilities the drivers report (``interface.Driver``), decided here by database.
    listen_notify = False  # wake-ups by LISTEN/NOTIFY
    one_statement_writes = False  # a plain batch as one autocommit statement (see Store)
    row_by_row_writes = False  # fenced writes a row at a time on the DB-API connection
    single_writer = False  # one writer at a time: this process's writes take turns first
    # Times kept as text whose spelling varies by writer: equal instants may not compare
    # equal in SQL, so a fence on a time shown to an operator compares them in Python.
    times_as_text = False
    autocommit_claims = False  # a claim runs as one autocommit statement, not in BEGIN…COMMIT
    # Adding a column takes only a constant default (see ``SchemaKeeper``), and a database
    # made Stator's switches to write-ahead logging after ``migrate``.
    constant_added_defaults = False
    wal = False
    # Statements may be prepared on the server (the Django driver's lent psycopg connections).
    server_prepares = False
    # Options of an engine built over connections Stator does not own (Django's).
    lent_engine_options: dict[str, Any] = {}
    # How a claim ordered by priority spells its "due by now" test (``_due_rows``).
    prioritized_due = "state_next <= :now"
    # A claim ranks each state's due rows inside that state's own branch, not over the union
    # of every state's partitioned by state (``_claim_sql``): the same ranks, fewer sorts
    # where the planner sorts the union by state again.
    rank_in_branches = False

    # A condition the claim's UPDATE carries that makes its commit not wait for the disk
    # (see ``PostgresDialect``); empty where commits cost no such wait.
    lease_commit = ""

    def picked_rows(self, pk: str) -> str:
        """How a claim's ``UPDATE`` finds the rows its ``picked`` CTE chose (by key)."""
        return f"{pk} IN (SELECT {pk} FROM picked)"

    def key_rows(self, keys: str, table: str, pk: str, columns: str, where: str,
                 order: str, cap: str) -> str:
        """A limited claim's ``FROM``: each row ``r`` of ``keys`` (``stator_lkey``,
        ``stator_room``) with its key's oldest due rows as ``q`` (``columns`` of them, chosen by
        ``where``, which names ``r.stator_lkey``).  Here a correlated ``IN``: a ``LIMIT`` may
        not name ``r``, so it takes up to ``cap`` (no key's room is larger) and the caller
        keeps ``stator_room``."""
        return (
            f"{keys} AS r JOIN {table} AS q ON q.{pk} IN (SELECT {pk} FROM {table} "
            f"WHERE {where} ORDER BY {order} LIMIT {cap})"
        )

    def fair_share(self, counts: list[str]) -> str | None:
        """The rows a claim of several states locks per state: the smallest ``r`` with
        ``sum(least(count, r)) >= :limit`` over ``counts`` (each state's due rows, read
        without locking, at most ``:limit``), or None where a claim locks no rows (each state
        then reads ``:limit``).  Locking ``:limit`` per state and keeping ``:limit`` of them
        all would lock up to one batch per state for nothing."""
        return None

    def limit_lock(self, name: str) -> str | None:
        """What a claim of a model with limits runs first, in its transaction, so that its
        count of running rows sees every other claim's; None where a claim is one writer's
        (SQLite: the write lock comes before the statement reads anything)."""
        return None

    def url_from_django(self, settings: dict[str, Any]) -> URL:
        """A Django database's settings as a URL: Stator's name for it."""
        raise NotImplementedError

    def ts(self, value: datetime) -> Any:
        """A timestamp as a bound parameter."""
        return value

    def time_type(self) -> TypeEngine[Any]:
        """How the database stores a timestamp (``_types.UTCDateTime``'s column)."""
        from sqlalchemy import DateTime

        return DateTime(timezone=True)

    # -- URLs (the SQLAlchemy driver's engine, its schema checks) ----------------------------

    def in_memory(self, url: URL) -> bool:
        """Whether ``url`` names a database that lives in one connection's memory."""
        return False

    def database_file(self, url: URL) -> Path | None:
        """The file ``url``'s database is, where it names one by path; None for a server,
        a database in memory, or a URI (which names its file, and may ask for read-only,
        its own way: left to the database)."""
        return None

    def engine_url(self, url: URL) -> URL:
        """The URL Stator's engine connects with (its DB-API driver where none is named)."""
        return url

    def ts_json(self, value: datetime | None) -> str | None:
        """A timestamp inside a JSON payload."""
        if value is None:
            return None
        return (value if value.tzinfo is UTC else value.astimezone(UTC)).isoformat()

    def payload_source(self, columns: list[tuple[str, str]]) -> str:
        raise NotImplementedError

    def batch_source(self, columns: list[tuple[str, str]]) -> str:
        """The rows of a batch of writes as a table ``v``; bound by ``batch_params``."""
        return self.payload_source(columns)

    def batch_times(self, values: list[datetime | None]) -> Any:
        """A batch's column of times, as ``batch_columns`` takes it: here each as
        ``ts_json`` spells it, each distinct time spelt once."""
        return [*map(TimeTexts(self.ts_json), values)]

    def batch_params(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        return {"payload": json.dumps(records)}

    def batch_columns(self, columns: dict[str, list[Any]]) -> dict[str, Any]:
        """``batch_params`` for a batch given column by column (equal lengths)."""
        names = list(columns)
        rows = zip(*columns.values(), strict=True)
        return self.batch_params([dict(zip(names, row, strict=True)) for row in rows])

    def history_append(
        self, table: str, history_type: str, state: str = "v.state",
        changed_iso: str = "v.changed_iso",
    ) -> str:
        """``table``'s ``state_history`` with ``[state, changed_iso]`` appended (SQL
        expressions: the batch's columns by default, or placeholders)."""
        raise NotImplementedError

    def notify_sql(self) -> str | None:
        return None

    def stale_snapshot(self, message: str) -> bool:
        """Whether a write failed (``message``, the driver's error) only because this
        transaction's reads are older than another's commit: a conflict, not a fault."""
        return False

    def with_notify(self, statement: str) -> str | None:
        """``statement`` (returning primary keys) and a wake-up notification as one statement:
        the keys, then one row whose key is NULL.  None where there is no NOTIFY."""
        return None

    def readable_time(self, expr: str) -> str:
        """``expr`` (a timestamp) as a reader of due times selects it: within what the driver
        can load (see ``_unreadable``)."""
        return expr

    def configure(self, engine: Engine, timeouts: Iterable[float] = ()) -> None:
        """Set per-connection behaviour the engine relies on (``timeouts``: the states'
        handler deadlines, which bound how long a transaction may legitimately sit idle)."""

    # -- what the launcher, the benchmarks and the operator's reads ask of a backend -------
    default_driver = ""  # the SQLAlchemy driver of a URL the launcher or a benchmark keys
    database_is_file = False  # a database is a file: globbed to discover, watched for changes
    # A server's databases a launcher may run, listed from the maintenance database.
    list_databases_sql: str | None = None
    maintenance_database: str | None = None
    channel_notify_sql: str | None = None  # a notification on ``:channel`` with ``:payload``
    wake_up = ""  # how a worker idle in another process learns of new work (as reported)
    named_params = False  # the DB-API driver takes ``:name`` parameters as written
    # Opens a DB-API transaction that will write, where the driver opens none itself.
    begin_for_writes: str | None = None
    integers_64_bit = False  # every integer column holds 64 bits, whatever its declared type
    text_holds_nul = True
    # The planner's idea of a table's rows (``:name``) and of ``state``'s commonest values
    # (``:table``, ``:schema``): counts without a scan, where the database keeps them.
    row_estimate_sql: str | None = None
    state_frequencies_sql: str | None = None
    analyze_prelude: tuple[str, ...] = ()  # settings ANALYZE runs with, as a live system's

    def canonical_url(self, url: URL, base: str) -> URL | None:
        """``url`` as commands over many databases key it: the default driver, a file's path
        made absolute from ``base``; None if it names no file (a database in memory)."""
        return url.set(drivername=self.default_driver)

    def series(self, start: int, stop: int, step: int = 1) -> str:
        """A FROM item whose column ``g`` counts from ``start`` to ``stop`` inclusive."""
        raise NotImplementedError

    def no_autovacuum_sql(self, table: str) -> str | None:
        """Stops background cleaning of ``table`` (a benchmark cleans between passes)."""
        return None

    def vacuum_sql(self, table: str) -> str | None:
        """Clears ``table``'s dead row versions; None where updates are made in place."""
        return None

    def django_database(self, url: URL) -> dict[str, Any]:
        """Django's ``DATABASES`` entry for ``url``, set up as Stator sets its own."""
        raise NotImplementedError

    # -- the columns of stator.django: its time field, its default, a task's JSON -----------

    def django_time(self, value: datetime) -> str | None:
        """A time as a Django parameter for a Stator time column (a naive one taken as UTC),
        spelled as the engine spells it; None: Django's own conversion."""
        return None

    def django_shown_time(self, sql: str) -> tuple[str, int]:
        """A Stator time column as a page listing rows selects it, with how many times its
        parameters occur: a value Python cannot hold reads as one it can (or NULL)."""
        return sql, 1

    def django_now_plus(self, seconds: float) -> str:
        """The database's current UTC time plus ``seconds``, as SQL Django will %-format."""
        if seconds:
            return f"(CURRENT_TIMESTAMP + interval '{seconds:.6f} seconds')"
        return "CURRENT_TIMESTAMP"

    def django_json(self, expr: str) -> str:
        """``expr`` (JSON text) as the value of a Django ``JSONField`` column."""
        return expr
