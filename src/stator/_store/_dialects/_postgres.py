"""PostgreSQL's answers: SKIP LOCKED claims, LISTEN/NOTIFY wake-ups, batches as typed arrays,
and the session bounds a worker needs on a network that can fail."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where it runs (see ``_base``)
    from sqlalchemy import URL, Engine

from ..._time_text import to_sqlite_text
from ._base import NOTIFY_CHANNEL, SqlDialect


class PostgresDialect(SqlDialect):
    name = "postgresql"

    listen_notify = True
    one_statement_writes = True
    autocommit_claims = True
    server_prepares = True
    # Nothing may register types on a lent connection (hstore's lookup also needs a real
    # psycopg object, not the borrowed one).
    lent_engine_options: dict[str, Any] = {"use_native_hstore": False}
    skip_locked = " FOR UPDATE SKIP LOCKED"
    # A claim only grants a lease, and losing a lease is already handled: the fence refuses
    # its holder's write and the row is claimed again.  So the claim's commit need not wait
    # for the WAL flush (about 0.4 ms of an idle worker's pickup here): if the server crashes
    # before the flush, the row is due again, as if the lease had expired.  The next durable
    # commit on the server (a write-back, a handler's transaction) flushes the claim with it.
    # ``set_config(..., true)`` lasts to the end of the claim's own transaction, whether the
    # claim runs in autocommit or inside one (it never outlives the claim's transaction).
    lease_commit = " AND set_config('synchronous_commit', 'off', true) IS NOT NULL"

    def picked_rows(self, pk: str) -> str:
        # The picked keys as one array, each row found by its primary key.  Spelt ``IN
        # (SELECT …)``, the planner estimated the CTE's rows and, on a table of a few
        # hundred pages, chose a hash semi-join over a sequential scan of the whole table
        # (the lease condition evaluated on every row): 20,000 rows read to update 100.
        return f"{pk} = ANY(ARRAY(SELECT {pk} FROM picked))"

    def key_rows(self, keys: str, table: str, pk: str, columns: str, where: str,
                 order: str, cap: str) -> str:
        """A ``LATERAL`` pick, one index range per key, locking no more than the key's room
        (rows held by other claims passed by: ``SKIP LOCKED``)."""
        return (
            f"{keys} AS r CROSS JOIN LATERAL (SELECT {pk}, {columns} FROM {table} "
            f"WHERE {where} ORDER BY {order} LIMIT GREATEST(r.stator_room, 0)"
            f"{self.skip_locked}) AS q"
        )

    def fair_share(self, counts: list[str]) -> str | None:
        # A lock costs far more than a read: a row locked and let go is written (its xmax, a
        # WAL record), and the next reader of its page settles the locker's outcome.  Locking
        # :limit rows per state to keep :limit of them all cost about a third of a
        # transition's database CPU with three states.
        total = " + ".join(f"least({count}, g)" for count in counts)
        return (
            f"coalesce((SELECT min(g) FROM generate_series(1, :limit) AS g "
            f"WHERE {total} >= :limit), :limit)"
        )

    def limit_lock(self, name: str) -> str | None:
        """A statement reads the rows as they were when it began (READ COMMITTED), so two
        claims running at once would each count the same running rows and, passing by each
        other's picks (``SKIP LOCKED``), each fill the same room.  Claims of a model with
        limits take turns on a transaction-scoped advisory lock instead, taken before the
        claim begins, so that its snapshot includes every earlier claim."""
        digest = hashlib.blake2b(f"stator-limits:{name}".encode(), digest_size=8).digest()
        return f"SELECT pg_advisory_xact_lock({int.from_bytes(digest, 'big', signed=True)})"

    def engine_url(self, url: URL) -> URL:
        return url.set(drivername="postgresql+psycopg") if url.drivername == self.name else url

    def url_from_django(self, settings: dict[str, Any]) -> URL:
        from sqlalchemy import URL

        s = settings
        return URL.create(
            "postgresql+psycopg", username=s.get("USER") or None,
            password=s.get("PASSWORD") or None, host=s.get("HOST") or None,
            port=int(s["PORT"]) if s.get("PORT") else None, database=str(s["NAME"]),
        )

    def payload_source(self, columns: list[tuple[str, str]]) -> str:
        spec = ", ".join(f"{name} {sqltype}" for name, sqltype in columns)
        return f"json_to_recordset(CAST(:payload AS json)) AS v({spec})"

    def batch_source(self, columns: list[tuple[str, str]]) -> str:
        # One typed array per column, unnested side by side: the server reads arrays, not
        # JSON (json_to_recordset cost about as much database CPU as the rows' updates).
        arrays = ", ".join(f"CAST(:b_{name} AS {sqltype}[])" for name, sqltype in columns)
        names = ", ".join(name for name, _ in columns)
        return f"unnest({arrays}) AS v({names})"

    def ts_json(self, value: datetime | None) -> str | None:
        # Fixed-width UTC text and its offset, which PostgreSQL reads as ISO 8601: spelt as
        # SQLite's (``to_sqlite_text`` keeps the last second's text), at about 60% of
        # ``isoformat``'s cost, once per moved row of a batched write.
        return None if value is None else to_sqlite_text(value) + "+00:00"

    def batch_params(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        if not records:
            return {}
        return {f"b_{name}": array_literal([r[name] for r in records]) for name in records[0]}

    def batch_times(self, values: list[datetime | None]) -> Any:
        # The times as they are, sent as one binary timestamptz[] (``TimeArray``): no text
        # per row in Python (formatting them cost about 0.5 us each) nor parsed by the server.
        if values.count(None) == len(values):
            return values  # no time to send (every row moved to a terminal state): as text
        return TimeArray(values)

    def batch_columns(self, columns: dict[str, list[Any]]) -> dict[str, Any]:
        return {
            f"b_{name}": values if type(values) is TimeArray else array_literal(values)
            for name, values in columns.items()
        }

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
    from sqlalchemy import event

    @event.listens_for(engine, "do_connect")
    def _on_do_connect(_dialect: Any, _record: Any, _cargs: Any, cparams: dict[str, Any]) -> None:
        cparams.update(with_client_settings(cparams))

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        millis = int(engine._stator_idle_limit * 1000)  # type: ignore[attr-defined]
        if hasattr(dbapi_conn, "adapters"):  # psycopg 3 (not psycopg2)
            binary_times(dbapi_conn.adapters)
        cursor = dbapi_conn.cursor()
        cursor.execute(f"SET idle_in_transaction_session_timeout = {millis}")
        cursor.close()
        dbapi_conn.commit()


class TimeArray(list[datetime | None]):
    """A batch's column of times, which psycopg sends as one binary ``timestamptz[]``
    (``binary_times``); any other driver adapts it as the list it is, which the statement's
    ``CAST`` reads as well.  For 100 times, about 13 us of Python against 50 us as text."""

    __slots__ = ()


def binary_times(adapters: Any) -> None:
    """Tell psycopg's ``adapters`` (a connection's, or the global map) to send a
    ``TimeArray`` as a binary ``timestamptz[]``.  Each connection Stator runs on is told when
    it connects (``configure_postgres``, a Django connection when lent): one that copied the
    global map before this (SQLAlchemy and Django register their own types on each) would
    else dump it as text, which is as correct, and slower."""
    from psycopg.types.array import ListBinaryDumper

    adapters.register_dumper(TimeArray, ListBinaryDumper)


def array_literal(values: Iterable[Any]) -> str:
    """PostgreSQL's text form of a one-dimensional array (``{1,"a b",NULL}``), cast to its
    type by the statement.  Written by hand because it is the write-back's hot path: the
    driver's own list adaptation cost about 40 µs per row of the batch, this under one.
    A column of strings none of which needs escaping, or of integers, none missing (a
    batch's states, keys, attempts), is written at once (100 strings: 2.3 µs, not 6.6)."""
    if type(values) is list and values:
        kinds = set(map(type, values))
        if kinds == {str}:
            whole = "".join(values)
            if '"' not in whole and "\\" not in whole:
                return '{"' + '","'.join(values) + '"}'
        elif kinds == {int}:  # not bool: its type is not int
            return "{" + str(values)[1:-1] + "}"  # "{1, 2}": spaces around items are ignored
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
