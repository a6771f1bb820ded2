"""The SQL for one application table run by Stator, built once per model and dialect.

Every statement has a fixed shape (the batch travels as one JSON parameter), so the
database can prepare it once and reuse the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Table, inspect
from sqlalchemy.engine import Dialect

from .._graph import StateGraph
from ..errors import ConfigError
from ._dialects import SqlDialect

WRITE_COLUMNS = [
    ("pk", "PK"),
    ("fence_state", "text"),
    ("fence", "timestamptz"),
    ("state", "text"),
    ("changed", "timestamptz"),
    ("changed_iso", "text"),
    ("next", "timestamptz"),
    ("attempts", "integer"),
    ("moved", "boolean"),
]


@dataclass
class TrackedModel:
    """A model class with its graph, table facts and prepared SQL."""

    model: type
    graph: type[StateGraph]
    table: Table
    pk: str
    pk_attr: str
    pk_type: str
    history_type: str | None
    name: str
    quoted_table: str = ""  # the table and column names as the SQL must spell them
    quoted_pk: str = ""
    quoted_columns: list[str] = field(default_factory=list)
    sql: dict[str, str] = field(default_factory=dict)
    where: str | None = None  # an extra claim condition (e.g. the task queues a worker runs)
    # The model's ``stator_claim_priority``: a column whose higher values are claimed first
    # (quoted as the SQL spells it), or None to claim by due time only.
    priority: str | None = None
    # The same column as the model's attribute, to hand a claimed batch out in that order.
    priority_attr: str | None = None
    # The model's ``stator_write_extra(store, conn, writes)``: writes ``Write.extra`` in the
    # transaction of the fenced write, for the rows whose fence held.
    write_extra: Callable[[Any, Connection, Sequence[Any]], None] | None = None
    # The model's ``stator_failure_extra(obj, write, error)``: the ``Write.extra`` of a write
    # that records a failure of the engine's (a handler past its deadline, an exception out
    # of the handler, changes that could not be saved), so the row keeps its own record of
    # it too (the django.tasks backend's ``errors``).  Only with ``write_extra``.
    failure_extra: Callable[[Any, Any, BaseException | None], Any] | None = None
    # The model's ``stator_lease_column``: a column the claim sets to the lease it grants (as
    # it sets ``state_next``), quoted.  While the two are equal the row is held by a worker;
    # any write of the engine's moves ``state_next`` away from it.  So an application can
    # tell a row being worked on from one merely due later (the django.tasks backend's
    # RUNNING) without a write of its own when the handler starts.
    lease_column: str | None = None
    # The model's ``stator_claim_stamps``: {column: "first" or "each"}, columns the claim
    # sets to its time when it takes a row up for a handler ("first": only while still
    # NULL), in the claim's own statement (quoted).  The django.tasks backend's
    # ``started_at`` and ``last_attempted_at``: a RUNNING task has both, at no extra write.
    claim_stamps: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, model: type, dialect: SqlDialect, sa_dialect: Dialect) -> TrackedModel:
        mapper: Any = inspect(model)
        table = mapper.local_table
        if not isinstance(table, Table):
            raise ConfigError(f"{model.__name__}: Stator needs a model mapped to one table")
        pks = list(table.primary_key.columns)
        if len(pks) != 1:
            raise ConfigError(f"{model.__name__}: Stator needs a single-column primary key")
        pk_attr = mapper.get_property_by_column(pks[0]).key
        return cls.from_table(model, table, pk_attr, dialect, sa_dialect)

    @classmethod
    def from_table(
        cls, model: type, table: Table, pk_attr: str, dialect: SqlDialect, sa_dialect: Dialect,
        where: str | None = None,
    ) -> TrackedModel:
        """From a table's description, whatever declared it (a SQLAlchemy mapping, or a
        Django model's fields: see ``_django.py``)."""
        graph = getattr(model, "state_graph", None)
        if not (isinstance(graph, type) and issubclass(graph, StateGraph)):
            raise ConfigError(f"{model.__name__}: set state_graph on the model")
        pks = list(table.primary_key.columns)
        if len(pks) != 1:
            raise ConfigError(f"{model.__name__}: Stator needs a single-column primary key")
        history = table.c.get("state_history")
        quote = sa_dialect.identifier_preparer
        priority = getattr(model, "stator_claim_priority", None)
        if priority is not None and priority not in table.c:
            raise ConfigError(
                f"{model.__name__}.stator_claim_priority names {priority!r}, which is not a "
                f"column of {table.name}"
            )
        lease_column = getattr(model, "stator_lease_column", None)
        if lease_column is not None and lease_column not in table.c:
            raise ConfigError(
                f"{model.__name__}.stator_lease_column names {lease_column!r}, which is not a "
                f"column of {table.name}"
            )
        stamps: dict[str, str] = dict(getattr(model, "stator_claim_stamps", None) or {})
        for column, when in stamps.items():
            if column not in table.c or when not in ("first", "each"):
                raise ConfigError(
                    f"{model.__name__}.stator_claim_stamps: {column!r}: {when!r} must name a "
                    f"column of {table.name} and say 'first' or 'each'"
                )
        tracked = cls(
            model=model, graph=graph, table=table, pk=pks[0].name, pk_attr=pk_attr,
            pk_type=pks[0].type.compile(sa_dialect),
            history_type=None if history is None else history.type.compile(sa_dialect),
            name=table.name, quoted_table=quote.format_table(table),
            quoted_pk=quote.quote(pks[0].name),
            quoted_columns=[quote.quote(c.name) for c in table.c],
            where=where, priority=None if priority is None else quote.quote(priority),
            priority_attr=priority,
            write_extra=getattr(model, "stator_write_extra", None),
            failure_extra=getattr(model, "stator_failure_extra", None),
            lease_column=None if lease_column is None else quote.quote(lease_column),
            claim_stamps={quote.quote(c): when for c, when in stamps.items()},
        )
        tracked.sql = _build_sql(tracked, dialect)
        return tracked

    def in_claim_order(self, rows: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        """A claimed batch, highest priority first: the claim picks rows in that order, but
        ``UPDATE … RETURNING`` hands them back in any order, and a batch starts in the order
        it is handed out (Django: a higher priority "will be run sooner")."""
        attr = self.priority_attr
        if attr is None or len(rows) < 2:
            return rows
        return sorted(rows, key=lambda pair: -getattr(pair[0], attr))


def _build_sql(t: TrackedModel, d: SqlDialect) -> dict[str, str]:
    table, pk = t.quoted_table, t.quoted_pk
    scheduled = [s.name for s in t.graph.scheduled_states()]
    sql: dict[str, str] = {}
    extra = f" AND ({t.where})" if t.where else ""
    # Not while the dashboard has the model paused: the claim reads the pause itself (a
    # one-time filter on a table of a few rows), so pausing costs no query of its own and a
    # pause holds from the next claim on.
    extra += f" AND NOT EXISTS (SELECT 1 FROM stator_paused WHERE model = {_literal(t.name)})"
    if scheduled:
        returning = ", ".join(t.quoted_columns)
        sql["claim"] = _claim_sql(
            table, pk, scheduled, d, returning, extra, t.priority, t.lease_column,
            _claim_stamps(t),
        )
        # For a claim that joins a caller's transaction (a Django ``atomic`` block): the
        # relaxed commit would reach the caller's own writes, so it stays durable.
        sql["claim_joined"] = sql["claim"].replace(d.lease_commit, "")
        order = "state_next" if t.priority is None else f"{t.priority} DESC, state_next"
        sql["claim_candidates"] = _claim_candidates_sql(table, pk, scheduled, d, extra, order)
        sql["next_due"] = " UNION ALL ".join(
            f"SELECT min(state_next) AS due FROM {table} "
            f"WHERE state = '{name}' AND state_next IS NOT NULL{extra}"
            for name in scheduled
        )
        if d.skip_locked:
            sql["next_claimable"] = _next_claimable_sql(table, scheduled, d, extra)
    columns = [(n, t.pk_type if ty == "PK" else ty) for n, ty in WRITE_COLUMNS]
    source = d.batch_source(columns)
    history = ""
    if t.history_type is not None:
        append = d.history_append(table, t.history_type)
        history = (
            f", state_history = CASE WHEN v.moved THEN {append} "
            f"ELSE {table}.state_history END"
        )
    sql["write"] = (
        f"UPDATE {table} SET state = v.state, state_changed = v.changed, "
        f"state_next = v.next, state_attempts = v.attempts{history} "
        f"FROM {source} WHERE {table}.{pk} = v.pk AND {table}.state = v.fence_state "
        f"AND {table}.state_next = v.fence RETURNING {table}.{pk}"
    )
    notify = d.with_notify(sql["write"])
    if notify is not None:
        sql["write_notify"] = notify
    if d.name == "sqlite":
        sql["write_row"] = _sqlite_write_row(t, d)
    sql["delete"] = (
        f"DELETE FROM {table} WHERE ({pk}, state, state_next) IN "
        f"(SELECT v.pk, v.fence_state, v.fence FROM {source}) RETURNING {pk}"
    )
    return sql


def _next_claimable_sql(table: str, states: list[str], d: SqlDialect, extra: str) -> str:
    """``next_due`` as a claim sees it: a row due by ``:now`` that another session holds
    locked (the application's ``SELECT … FOR UPDATE``, another worker mid-claim) is passed by,
    exactly as the claim's ``SKIP LOCKED`` passes it by; rows not due yet all count.  Only
    the first unlocked due row of each state is locked, for the rest of this read."""
    return " UNION ALL ".join(
        f"SELECT * FROM (SELECT state_next AS due FROM {table} WHERE state = '{name}' "
        f"AND state_next IS NOT NULL AND state_next <= :now{extra} "
        f"ORDER BY state_next LIMIT 1{d.skip_locked}) AS n{i} "
        f"UNION ALL SELECT min(state_next) AS due FROM {table} "
        f"WHERE state = '{name}' AND state_next > :now{extra}"
        for i, name in enumerate(states)
    )


def _literal(text: str) -> str:
    """A SQL string literal (a table name, written into a statement built once)."""
    return "'" + text.replace("'", "''") + "'"


def _sqlite_write_row(t: TrackedModel, d: SqlDialect) -> str:
    """The same fenced write for one row, positional parameters (SQLite: ``Store._write_rows``):
    ?1 state, ?2 changed, ?3 next, ?4 attempts, ?5 pk, ?6 fence state, ?7 fence, ?8 moved,
    ?9 changed (ISO, for the history)."""
    table, pk = t.quoted_table, t.quoted_pk
    history = ""
    if t.history_type is not None:
        append = d.history_append(table, t.history_type, "?1", "?9")
        history = f", state_history = CASE WHEN ?8 THEN {append} ELSE {table}.state_history END"
    return (
        f"UPDATE {table} SET state = ?1, state_changed = ?2, state_next = ?3, "
        f"state_attempts = ?4{history} WHERE {pk} = ?5 AND state = ?6 AND state_next = ?7"
    )


def _due_branches(
    table: str, pk: str, states: list[str], d: SqlDialect, picked: str, extra: str, order: str
) -> str:
    """Each state's oldest due rows, at most :limit per state (the rows a claim may take)."""
    return " UNION ALL ".join(
        f"SELECT * FROM (SELECT {pk}, state{picked} FROM {table} "
        f"WHERE state = '{name}' AND state_next IS NOT NULL AND state_next <= :now{extra} "
        f"ORDER BY {order} LIMIT :limit{d.skip_locked}) AS b{i}"
        for i, name in enumerate(states)
    )


def _claim_candidates_sql(
    table: str, pk: str, states: list[str], d: SqlDialect, extra: str, order: str
) -> str:
    """The rows a claim with these parameters could have taken (due now), and those it did
    take if it committed (their ``state_next`` is its lease): where to look for a row the
    claim could not read (``_unreadable``)."""
    leased = " UNION ALL ".join(
        f"SELECT {pk}, state FROM {table} WHERE state = '{name}' AND state_next = :lease_{i}"
        for i, name in enumerate(states)
    )
    return f"{_due_branches(table, pk, states, d, '', extra, order)} UNION {leased}"


def _claim_stamps(t: TrackedModel) -> str:
    """The claim's ``SET`` of ``t.claim_stamps``: only rows taken up for a handler (of an
    automatic state) are stamped, not those claimed for a deletion or a timed edge."""
    if not t.claim_stamps:
        return ""
    handled = ", ".join(_literal(s.name) for s in t.graph.states.values() if s.automatic)
    sets = []
    for column, when in t.claim_stamps.items():
        value = f"COALESCE({column}, :now)" if when == "first" else ":now"
        sets.append(f", {column} = CASE WHEN state IN ({handled}) THEN {value} ELSE {column} END")
    return "".join(sets)


def _claim_sql(
    table: str, pk: str, states: list[str], d: SqlDialect, returning: str, extra: str = "",
    priority: str | None = None, lease_column: str | None = None, stamps: str = "",
) -> str:
    """One statement that leases up to :limit due rows, shared fairly between states.

    Each state contributes its oldest due rows (an index range scan per state); the picks are
    interleaved round-robin (first of each state, then second of each...) so a state with a
    backlog cannot starve the others.  PostgreSQL skips rows other workers hold.  With a
    ``priority`` column, each state's rows are taken highest priority first, then oldest.
    With a ``lease_column``, the lease is copied there too; ``stamps`` are more of the
    ``SET`` (``_claim_stamps``).
    """
    order = "state_next" if priority is None else f"{priority} DESC, state_next"
    picked = f", {priority}" if priority is not None else ""
    branches = _due_branches(table, pk, states, d, f", state_next{picked}", extra, order)
    lease = " ".join(f"WHEN '{name}' THEN :lease_{i}" for i, name in enumerate(states))
    copy = f", {lease_column} = CASE state {lease} END" if lease_column is not None else ""
    return (
        f"WITH due AS (SELECT {pk}, state_next{picked}, row_number() OVER "
        f"(PARTITION BY state ORDER BY {order}) AS rn FROM ({branches}) AS c), "
        f"picked AS (SELECT {pk} FROM due ORDER BY rn, {order} LIMIT :limit) "
        f"UPDATE {table} SET state_next = CASE state {lease} END{copy}{stamps} "
        f"WHERE {pk} IN (SELECT {pk} FROM picked){d.lease_commit} RETURNING {returning}"
    )

