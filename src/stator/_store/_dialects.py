"""What differs between SQLite and PostgreSQL, and nothing else.

Everything here is a small piece of SQL or a connection setting; the statements built from
these pieces are shared (``_tracked.py``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import URL, DateTime, Engine, String, event
from sqlalchemy.types import TypeEngine

from .._time_text import to_sqlite_text

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

    def url_from_django(self, settings: dict[str, Any]) -> URL:
        """A Django database's settings as a URL: Stator's name for it."""
        raise NotImplementedError
    # A condition the claim's UPDATE carries that makes its commit not wait for the disk
    # (see ``PostgresDialect``); empty where commits cost no such wait.
    lease_commit = ""

    def ts(self, value: datetime) -> Any:
        """A timestamp as a bound parameter."""
        return value

    def time_type(self) -> TypeEngine[Any]:
        """How the database stores a timestamp (``_types.UTCDateTime``'s column)."""
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

    def batch_params(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        return {"payload": json.dumps(records)}

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


class SqliteDialect(SqlDialect):
    name = "sqlite"
    constant_added_defaults = True
    wal = True

    def url_from_django(self, settings: dict[str, Any]) -> URL:
        return URL.create("sqlite", database=str(settings["NAME"]))
    row_by_row_writes = True
    single_writer = True
    times_as_text = True

    def ts(self, value: datetime) -> Any:
        return to_sqlite_text(value)

    def time_type(self) -> TypeEngine[Any]:
        return String(26)  # ``_time_text``: fixed-width, sorts in time order

    def in_memory(self, url: URL) -> bool:
        database = url.database or ""
        return not database or database == ":memory:" or "mode=memory" in database or (
            str(url.query.get("mode", "")) == "memory")

    def database_file(self, url: URL) -> Path | None:
        if not url.database or url.database == ":memory:":
            return None
        if str(url.query.get("uri", "")).lower() in ("true", "1") or url.database.startswith(
                "file:"):
            return None
        return Path(url.database)

    def ts_json(self, value: datetime | None) -> str | None:
        return None if value is None else to_sqlite_text(value)

    def payload_source(self, columns: list[tuple[str, str]]) -> str:
        picks = ", ".join(f"value->>'{name}' AS {name}" for name, _ in columns)
        return f"(SELECT {picks} FROM json_each(:payload)) AS v"

    def stale_snapshot(self, message: str) -> bool:
        # SQLite cannot upgrade a read transaction whose snapshot is out of date: someone
        # committed since it first read, so it may have moved the rows it meant to write.
        return "locked" in message

    def history_append(
        self, table: str, history_type: str, state: str = "v.state",
        changed_iso: str = "v.changed_iso",
    ) -> str:
        # A history that is JSON but not an array (raw SQL, another tool) becomes the first
        # element of one, as PostgreSQL's ``||`` does: json_insert's '$[#]' would otherwise
        # leave it unchanged, dropping the transition from the history without a word.
        history = f"coalesce({table}.state_history, '[]')"
        return (
            f"json_insert(CASE json_type({history}) WHEN 'array' THEN {history} "
            f"ELSE json_array(json({history})) END, '$[#]', "
            f"json_array({state}, {changed_iso}))"
        )

    def configure(self, engine: Engine, timeouts: Iterable[float] = ()) -> None:
        configure_sqlite(engine)

    # -- what the launcher, the benchmarks and the operator's reads ask of a backend -------
    default_driver = "sqlite"
    database_is_file = True
    wake_up = "PRAGMA data_version poll"
    named_params = True
    begin_for_writes = "BEGIN IMMEDIATE"
    integers_64_bit = True
    analyze_prelude = ("PRAGMA analysis_limit = 1000",)

    def canonical_url(self, url: URL, base: str) -> URL | None:
        database = url.database
        if not database or database == ":memory:" or database.startswith("file:"):
            return None
        path = os.path.abspath(os.path.join(base, database))
        return url.set(drivername=self.default_driver, database=path)

    def series(self, start: int, stop: int, step: int = 1) -> str:
        return (
            f"(WITH RECURSIVE n(g) AS (SELECT {start} UNION ALL SELECT g + {step} FROM n "
            f"WHERE g + {step} <= {stop}) SELECT g FROM n) AS series"
        )

    def django_database(self, url: URL) -> dict[str, Any]:
        # What ``configure_sqlite`` sets on the engine's connections, so both sides match.
        return {
            "ENGINE": "django.db.backends.sqlite3", "NAME": url.database,
            "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
        }

    # -- the columns of stator.django (see ``SqlDialect``) ----------------------------------

    def django_time(self, value: datetime) -> str | None:
        # Django writes ``str(datetime)``, which drops a zero fraction; ``state_next`` is a
        # fencing token compared for equality, so every writer spells a time the same way.
        return to_sqlite_text(value if value.tzinfo is not None else value.replace(tzinfo=UTC))

    def django_shown_time(self, sql: str) -> tuple[str, int]:
        # A time SQLite reads, on a day that exists, before 24:00; garbage text reads as NULL.
        return (f"(CASE WHEN julianday({sql}) IS NOT NULL AND date(julianday(substr("
                f"{sql}, 1, 10))) = substr({sql}, 1, 10) AND substr({sql}, 12, 2) < '24' "
                f"THEN {sql} END)", 5)

    def django_now_plus(self, seconds: float) -> str:
        if seconds:
            return f"(strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+{seconds:.6f} seconds'))"
        return "(strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now'))"


class PostgresDialect(SqlDialect):
    name = "postgresql"

    def engine_url(self, url: URL) -> URL:
        return url.set(drivername="postgresql+psycopg") if url.drivername == self.name else url
    listen_notify = True
    one_statement_writes = True
    autocommit_claims = True
    server_prepares = True
    # Nothing may register types on a lent connection (hstore's lookup also needs a real
    # psycopg object, not the borrowed one).
    lent_engine_options: dict[str, Any] = {"use_native_hstore": False}

    def url_from_django(self, settings: dict[str, Any]) -> URL:
        s = settings
        return URL.create(
            "postgresql+psycopg", username=s.get("USER") or None,
            password=s.get("PASSWORD") or None, host=s.get("HOST") or None,
            port=int(s["PORT"]) if s.get("PORT") else None, database=str(s["NAME"]),
        )
    skip_locked = " FOR UPDATE SKIP LOCKED"
    # A claim only grants a lease, and losing a lease is already handled: the fence refuses
    # its holder's write and the row is claimed again.  So the claim's commit need not wait
    # for the WAL flush (about 0.4 ms of an idle worker's pickup here): if the server crashes
    # before the flush, the row is due again, as if the lease had expired.  The next durable
    # commit on the server (a write-back, a handler's transaction) flushes the claim with it.
    # ``set_config(..., true)`` lasts to the end of the claim's own transaction, whether the
    # claim runs in autocommit or inside one (it never outlives the claim's transaction).
    lease_commit = " AND set_config('synchronous_commit', 'off', true) IS NOT NULL"

    def payload_source(self, columns: list[tuple[str, str]]) -> str:
        spec = ", ".join(f"{name} {sqltype}" for name, sqltype in columns)
        return f"json_to_recordset(CAST(:payload AS json)) AS v({spec})"

    def batch_source(self, columns: list[tuple[str, str]]) -> str:
        # One typed array per column, unnested side by side: the server reads arrays, not
        # JSON (json_to_recordset cost about as much database CPU as the rows' updates).
        arrays = ", ".join(f"CAST(:b_{name} AS {sqltype}[])" for name, sqltype in columns)
        names = ", ".join(name for name, _ in columns)
        return f"unnest({arrays}) AS v({names})"

    def batch_params(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        if not records:
            return {}
        return {f"b_{name}": array_literal([r[name] for r in records]) for name in records[0]}

    def history_append(
        self, table: str, history_type: str, state: str = "v.state",
        changed_iso: str = "v.changed_iso",
    ) -> str:
        return (
            f"CAST(coalesce(CAST({table}.state_history AS jsonb), CAST('[]' AS jsonb)) || "
            f"jsonb_build_array(jsonb_build_array({state}, {changed_iso})) "
            f"AS {history_type})"
        )

    def readable_time(self, expr: str) -> str:
        # psycopg refuses infinity and years outside 1..9999 (valid timestamptz values): one
        # too early is due long ago, one too late is never.
        low, high = "CAST('0001-01-02' AS timestamptz)", "CAST('9999-12-30' AS timestamptz)"
        return f"CASE WHEN {expr} < {low} THEN {low} WHEN {expr} <= {high} THEN {expr} END"

    def notify_sql(self) -> str | None:
        return f"SELECT pg_notify('{NOTIFY_CHANNEL}', :table)"

    def with_notify(self, statement: str) -> str | None:
        # A data-modifying CTE runs once, whoever reads it; the notification's branch is read
        # by the UNION ALL whether or not the statement changed rows (as the separate NOTIFY
        # did).  Delivered when the statement's implicit transaction commits.
        return (
            f"WITH changed AS ({statement}) SELECT * FROM changed UNION ALL "
            f"SELECT NULL FROM (SELECT pg_notify('{NOTIFY_CHANNEL}', :table)) AS n"
        )

    def configure(self, engine: Engine, timeouts: Iterable[float] = ()) -> None:
        configure_postgres(engine, idle_transaction_limit(timeouts))

    # -- what the launcher, the benchmarks and the operator's reads ask of a backend -------
    default_driver = "postgresql+psycopg"
    list_databases_sql = (
        "SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate "
        "ORDER BY datname"
    )
    maintenance_database = "postgres"
    channel_notify_sql = "SELECT pg_notify(:channel, :payload)"
    wake_up = "LISTEN/NOTIFY"
    text_holds_nul = False
    row_estimate_sql = "SELECT reltuples FROM pg_class WHERE oid = to_regclass(:name)"
    state_frequencies_sql = (
        "SELECT most_common_vals::text::text[], most_common_freqs FROM pg_stats "
        "WHERE tablename = :table AND attname = 'state' "
        "AND schemaname = coalesce(:schema, current_schema())"
    )

    def series(self, start: int, stop: int, step: int = 1) -> str:
        return f"generate_series({start}, {stop}, {step}) AS g"

    def no_autovacuum_sql(self, table: str) -> str | None:
        return f"ALTER TABLE {table} SET (autovacuum_enabled = false)"

    def vacuum_sql(self, table: str) -> str | None:
        return f"VACUUM (ANALYZE) {table}"

    def django_database(self, url: URL) -> dict[str, Any]:
        return {
            "ENGINE": "django.db.backends.postgresql", "NAME": url.database,
            "USER": url.username or "", "PASSWORD": url.password or "",
            "HOST": url.host or "", "PORT": str(url.port or ""),
        }

    # -- the columns of stator.django (see ``SqlDialect``) ----------------------------------

    def django_shown_time(self, sql: str) -> tuple[str, int]:
        # psycopg refuses infinity and years outside 1..9999: shown as the nearest it holds.
        low, high = "'0001-01-02'::timestamptz", "'9999-12-30'::timestamptz"
        clamp = f"CASE WHEN {sql} < {low} THEN {low} WHEN {sql} > {high} THEN {high} ELSE {sql} END"
        return f"({clamp})", 3

    def django_json(self, expr: str) -> str:
        return f"CAST({expr} AS jsonb)"


def dialect_for(engine_or_name: Engine | str) -> SqlDialect:
    name = engine_or_name if isinstance(engine_or_name, str) else engine_or_name.dialect.name
    if name == "sqlite":
        return SqliteDialect()
    if name == "postgresql":
        return PostgresDialect()
    from ..errors import ConfigError

    raise ConfigError(f"Stator supports SQLite and PostgreSQL, not {name!r}")

def dialect_named(name: str) -> SqlDialect:
    """The dialect of a database named as SQLAlchemy names it, the generic one for another
    (a type compiled for a database Stator does not run on)."""
    return _DJANGO_DIALECTS.get(name) or SqlDialect()


def django_dialect(vendor: str) -> SqlDialect:
    """The dialect of a Django connection's ``vendor``; for a database Stator does not run on
    (another of the project's databases), the generic one: Django's own SQL, unchanged."""
    return _DJANGO_DIALECTS.get(vendor) or SqlDialect()


_DJANGO_DIALECTS: dict[str, SqlDialect] = {d.name: d for d in (SqliteDialect(), PostgresDialect())}


# -- SQLite transaction control ------------------------------------------------------------
# pysqlite's own transaction handling is turned off so that Stator decides how each
# transaction begins: the engine's writes take the write lock up front (BEGIN IMMEDIATE, so
# they queue on busy_timeout instead of failing mid-transaction); handler sessions read
# without holding a snapshot and take the lock only when they first write.

BEGIN_OPTION = "stator_begin"


def is_stator_database(cursor: Any) -> bool:
    """Whether Stator's tables are in this SQLite database.  WAL is a lasting property of a
    file: it is switched on only for Stator's own databases (and by ``migrate``), so a command
    pointed at the wrong file (another application's database, an empty file) changes
    nothing there."""
    cursor.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stator_schema'")
    return cursor.fetchone() is not None


def use_wal(engine: Engine) -> None:
    """Switch a SQLite database that has just become Stator's to WAL (see
    ``is_stator_database``)."""
    with engine.connect().execution_options(**{BEGIN_OPTION: "lazy"}) as conn:
        conn.exec_driver_sql("PRAGMA journal_mode = WAL")  # outside any transaction


def configure_sqlite(engine: Engine) -> None:
    if getattr(engine, "_stator_configured", False):
        return
    engine._stator_configured = True  # type: ignore[attr-defined]

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA busy_timeout = 10000")
        if is_stator_database(cursor):
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(BEGIN_OPTION, "deferred")
        if mode == "immediate":
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        elif mode == "deferred":
            conn.exec_driver_sql("BEGIN")
        # "lazy": no transaction until the first write (see handler sessions)


# -- PostgreSQL sessions across a network that can fail -----------------------------------
# A host cut off from its database leaves two kinds of wreckage.  On the server, its session
# stays "idle in transaction" holding the row locks of a claim or write whose COMMIT never
# arrived; SKIP LOCKED makes every other worker pass those rows by, long after their lease,
# until the server's own TCP keepalive gives up (two hours with Linux defaults).  On the
# client, every call waits on TCP retransmits for as long (about 15 minutes).  The server
# side is bounded by idle_in_transaction_session_timeout, the client side by libpq's TCP
# keepalives and tcp_user_timeout (unacknowledged data or probes for that long: the
# connection is dead).  Values a user put in the URL or connect_args win over these.

CLIENT_SETTINGS: dict[str, int] = {
    "connect_timeout": 5,  # seconds
    "keepalives": 1,
    "keepalives_idle": 3,  # seconds of silence before the first probe
    "keepalives_interval": 1,
    "keepalives_count": 3,
    # Data or probes unacknowledged this long (ms): the link is dead.  Only a silent peer
    # trips it, never a slow query (the server's kernel acknowledges at once).
    "tcp_user_timeout": 5_000,
}


IDLE_FLOOR = 5.0  # seconds; see idle_transaction_limit


def idle_transaction_limit(timeouts: Iterable[float]) -> float:
    """Seconds a worker session may sit idle inside a transaction before the server ends it.

    Longer than the longest handler deadline (a handler may hold its session's transaction
    open while it works, up to its deadline), shorter than a lease (twice a deadline), so
    that rows locked by a vanished host are free again before their lease ends.  With
    deadlines of different lengths, the longest wins: a short-deadline row locked by a
    vanished host may then wait past its lease.  Never under ``IDLE_FLOOR``: on a starved
    machine a claim's own transaction can sit for a second between its statements, and ending
    it costs a failed claim and an outage warning (seen with 1 s deadlines, 100k-row torture).
    """
    values = [t for t in timeouts if t > 0]
    if not values:
        values = [30.0]
    return max(max(values) + min(values) / 2, IDLE_FLOOR)


def with_client_settings(params: dict[str, Any]) -> dict[str, Any]:
    """libpq connection parameters with Stator's network bounds added where unset.

    Also reads psycopg's ``prepare_threshold`` from the URL (a string there): behind a
    transaction-pooling PgBouncer older than 1.21, ``?prepare_threshold=none`` keeps psycopg
    from preparing statements on one server connection and running them on another.
    """
    merged = {**CLIENT_SETTINGS, **params}
    threshold = merged.get("prepare_threshold")
    if isinstance(threshold, str):
        text = threshold.strip().lower()
        merged["prepare_threshold"] = None if text in ("", "none", "off") else int(text)
    return merged


def listen_connection(engine: Engine, listen_url: str | None = None) -> Any:
    """A psycopg connection of its own (outside any pool) for LISTEN, in autocommit mode: to
    ``listen_url`` if given (past a pooler, straight to the server), else to ``engine``'s
    database."""
    import psycopg
    from sqlalchemy.engine import make_url

    url = engine.url if listen_url is None else make_url(listen_url)
    args, kwargs = engine.dialect.create_connect_args(url)
    return psycopg.connect(*args, **with_client_settings(dict(kwargs)), autocommit=True)


def configure_postgres(engine: Engine, idle_limit: float) -> None:
    # One engine may serve several Stator objects: keep the most lenient limit asked for.
    limit = max(idle_limit, getattr(engine, "_stator_idle_limit", 0.0))
    engine._stator_idle_limit = limit  # type: ignore[attr-defined]
    if getattr(engine, "_stator_configured", False):
        return
    engine._stator_configured = True  # type: ignore[attr-defined]

    @event.listens_for(engine, "do_connect")
    def _on_do_connect(_dialect: Any, _record: Any, _cargs: Any, cparams: dict[str, Any]) -> None:
        cparams.update(with_client_settings(cparams))

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        millis = int(engine._stator_idle_limit * 1000)  # type: ignore[attr-defined]
        cursor = dbapi_conn.cursor()
        cursor.execute(f"SET idle_in_transaction_session_timeout = {millis}")
        cursor.close()
        dbapi_conn.commit()


def array_literal(values: Iterable[Any]) -> str:
    """PostgreSQL's text form of a one-dimensional array (``{1,"a b",NULL}``), cast to its
    type by the statement.  Written by hand because it is the write-back's hot path: the
    driver's own list adaptation cost about 40 µs per row of the batch, this under one."""
    items = []
    for v in values:
        if v is None:
            items.append("NULL")
        elif isinstance(v, str):
            if '"' in v or "\\" in v:
                v = v.replace("\\", "\\\\").replace('"', '\\"')
            items.append(f'"{v}"')
        elif v is True or v is False:
            items.append("t" if v else "f")
        else:
            items.append(str(v))  # numbers, UUIDs: no character that needs quoting
    return "{" + ",".join(items) + "}"
