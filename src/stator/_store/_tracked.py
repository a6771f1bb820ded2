"""The SQL for one application table run by Stator, built once per model and dialect.

Every statement has a fixed shape (the batch travels as one JSON parameter), so the
database can prepare it once and reuse the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table, inspect
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
    sql: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, model: type, dialect: SqlDialect, sa_dialect: Dialect) -> TrackedModel:
        mapper: Any = inspect(model)
        table = mapper.local_table
        if not isinstance(table, Table):
            raise ConfigError(f"{model.__name__}: Stator needs a model mapped to one table")
        graph = getattr(model, "state_graph", None)
        if not (isinstance(graph, type) and issubclass(graph, StateGraph)):
            raise ConfigError(f"{model.__name__}: set state_graph on the model")
        pks = list(table.primary_key.columns)
        if len(pks) != 1:
            raise ConfigError(f"{model.__name__}: Stator needs a single-column primary key")
        history = table.c.get("state_history")
        tracked = cls(
            model=model, graph=graph, table=table, pk=pks[0].name,
            pk_attr=mapper.get_property_by_column(pks[0]).key,
            pk_type=pks[0].type.compile(sa_dialect),
            history_type=None if history is None else history.type.compile(sa_dialect),
            name=table.name,
        )
        tracked.sql = _build_sql(tracked, dialect)
        return tracked

    def quoted(self) -> str:
        return self.table.name


def _build_sql(t: TrackedModel, d: SqlDialect) -> dict[str, str]:
    table, pk = t.quoted(), t.pk
    scheduled = [s.name for s in t.graph.scheduled_states()]
    sql: dict[str, str] = {}
    if scheduled:
        returning = ", ".join(c.name for c in t.table.c)
        sql["claim"] = _claim_sql(table, pk, scheduled, d, returning)
        sql["next_due"] = " UNION ALL ".join(
            f"SELECT min(state_next) AS due FROM {table} "
            f"WHERE state = '{name}' AND state_next IS NOT NULL"
            for name in scheduled
        )
    columns = [(n, t.pk_type if ty == "PK" else ty) for n, ty in WRITE_COLUMNS]
    source = d.payload_source(columns)
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
    sql["delete"] = (
        f"DELETE FROM {table} WHERE ({pk}, state, state_next) IN "
        f"(SELECT v.pk, v.fence_state, v.fence FROM {source}) RETURNING {pk}"
    )
    return sql


def _claim_sql(table: str, pk: str, states: list[str], d: SqlDialect, returning: str) -> str:
    """One statement that leases up to :limit due rows, shared fairly between states.

    Each state contributes its oldest due rows (an index range scan per state); the picks are
    interleaved round-robin (first of each state, then second of each...) so a state with a
    backlog cannot starve the others.  PostgreSQL skips rows other workers hold.
    """
    branches = " UNION ALL ".join(
        f"SELECT * FROM (SELECT {pk}, state, state_next FROM {table} "
        f"WHERE state = '{name}' AND state_next IS NOT NULL AND state_next <= :now "
        f"ORDER BY state_next LIMIT :limit{d.skip_locked}) AS b{i}"
        for i, name in enumerate(states)
    )
    lease = " ".join(f"WHEN '{name}' THEN :lease_{i}" for i, name in enumerate(states))
    return (
        f"WITH due AS (SELECT {pk}, state_next, row_number() OVER "
        f"(PARTITION BY state ORDER BY state_next) AS rn FROM ({branches}) AS c), "
        f"picked AS (SELECT {pk} FROM due ORDER BY rn, state_next LIMIT :limit) "
        f"UPDATE {table} SET state_next = CASE state {lease} END "
        f"WHERE {pk} IN (SELECT {pk} FROM picked) RETURNING {returning}"
    )


def row_key(pk: Any) -> str:
    return str(pk)
