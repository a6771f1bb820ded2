"""One application table run by Stator: its model, graph, table facts and the hooks it
declares, with its statements (``_statements.py``) built once per model and dialect."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Table, inspect
from sqlalchemy.engine import Dialect

from .._graph import StateGraph
from .._limits import Limit, limit_problems
from ..errors import ConfigError
from ._dialects import SqlDialect
from ._schema import STATOR_COLUMNS
from ._statements import Statements, build_statements
from ._write_columns import WriteColumns, checked


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
    name: str  # the table's name: the key in Stator's own tables, metrics and URLs
    label: str = ""  # what people call the model (``label_of``): what status and pages show
    quoted_table: str = ""  # the table and column names as the SQL must spell them
    quoted_pk: str = ""
    quoted_columns: list[str] = field(default_factory=list)
    sql: Statements = field(default_factory=Statements)
    where: str | None = None  # an extra claim condition (e.g. the task queues a worker runs)
    # The model's ``stator_claim_priority``: a column whose higher values are claimed first
    # (quoted as the SQL spells it), or None to claim by due time only.
    priority: str | None = None
    # The same column as the model's attribute, to hand a claimed batch out in that order.
    priority_attr: str | None = None
    # The model's ``stator_write_extra(store, conn, writes)``: writes ``Write.extra`` in the
    # transaction of the fenced write, for the rows whose fence held.
    write_extra: Callable[[Any, Connection, Sequence[Any]], None] | None = None
    # The model's ``stator_write_columns`` ({column: kind}, ``_write_columns``): columns the
    # fenced write itself sets from ``Write.extra``, in the same statement and under the same
    # fence as the row's transition (instead of ``stator_write_extra``'s statement of its
    # own); with each one's quoted name and type as the statements spell them.
    write_columns: WriteColumns = ()
    write_columns_sql: tuple[tuple[str, str], ...] = ()
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
    # Per state with a concurrency limit: (``max_running``, its key column quoted, or None),
    # from the graph's ``State(max_running=…)`` and the model's ``stator_claim_limits``
    # (``_limit_statements``).
    limits: dict[str, Limit] = field(default_factory=dict)
    # More limits a state's rows are under, each per key too (a task under its queue's limit
    # and its own): a row runs only while every one of its keys has room.
    also_limits: dict[str, tuple[Limit, ...]] = field(default_factory=dict)
    # The states whose handlers get plain rows (``_plain_rows``), not the model's instances.
    plain_states: frozenset[str] = frozenset()

    @property
    def writes_extra(self) -> bool:
        """Something writes what a handler leaves in ``stator_extra``."""
        return self.write_extra is not None or bool(self.write_columns)

    @property
    def limited(self) -> bool:
        """Some state has a concurrency limit: the claim counts running rows first."""
        return bool(self.limits)

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
        limits: Mapping[str, Limit | Sequence[Limit]] | None = None,
    ) -> TrackedModel:
        """From a table's description, whatever declared it (a SQLAlchemy mapping, or a
        Django model's fields: see ``_django.py``).  ``limits``: concurrency limits by state
        name, over the graph's own (the Django task backend's ``QUEUE_LIMITS``), or a list
        of them that must all hold (with ``TASK_LIMITS``)."""
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
        # (A claim stamp may also be a write column, as a task's start times are: the claim
        # sets one, the write the other.)
        taken = {**dict.fromkeys([*STATOR_COLUMNS, "state_history"], "the engine writes"),
                 pks[0].name: "is the primary key"}
        _refuse_taken(model, "stator_lease_column", [lease_column] if lease_column else [], taken)
        taken.update(dict.fromkeys([lease_column] if lease_column else [], "holds the lease"))
        _refuse_taken(model, "stator_claim_stamps", stamps, taken)
        declared = _declared_limits(model, graph, table, lease_column, limits or {})
        write_columns = _write_columns(model, table)
        _refuse_taken(model, "stator_write_columns", [c for c, _ in write_columns], taken)
        tracked = cls(
            model=model, graph=graph, table=table, pk=pks[0].name, pk_attr=pk_attr,
            pk_type=pks[0].type.compile(sa_dialect),
            history_type=None if history is None else history.type.compile(sa_dialect),
            name=table.name, label=label_of(model), quoted_table=quote.format_table(table),
            quoted_pk=quote.quote(pks[0].name),
            quoted_columns=[quote.quote(c.name) for c in table.c],
            where=where, priority=None if priority is None else quote.quote(priority),
            priority_attr=priority,
            write_extra=getattr(model, "stator_write_extra", None),
            failure_extra=getattr(model, "stator_failure_extra", None),
            write_columns=write_columns,
            write_columns_sql=tuple(
                (quote.quote(c), table.c[c].type.compile(sa_dialect)) for c, _ in write_columns
            ),
            lease_column=None if lease_column is None else quote.quote(lease_column),
            claim_stamps={quote.quote(c): when for c, when in stamps.items()},
            limits={name: _quoted(quote, all_[0]) for name, all_ in declared.items()},
            also_limits={name: tuple(_quoted(quote, one) for one in all_[1:])
                         for name, all_ in declared.items() if len(all_) > 1},
            plain_states=frozenset(s.name for s in graph.states.values() if s.plain_rows),
        )
        tracked.sql = build_statements(tracked, dialect)
        return tracked

    def in_claim_order(self, rows: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        """A claimed batch, highest priority first: the claim picks rows in that order, but
        ``UPDATE … RETURNING`` hands them back in any order, and a batch starts in the order
        it is handed out (Django: a higher priority "will be run sooner")."""
        attr = self.priority_attr
        if attr is None or len(rows) < 2:
            return rows
        return sorted(rows, key=lambda pair: -getattr(pair[0], attr))


def _write_columns(model: type, table: Table) -> WriteColumns:
    """The model's ``stator_write_columns``, checked: one way to write ``stator_extra``."""
    declared = getattr(model, "stator_write_columns", None)
    try:
        columns = checked(model, declared, list(table.c.keys()))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if columns and getattr(model, "stator_write_extra", None) is not None:
        raise ConfigError(
            f"{model.__name__} declares both stator_write_columns and stator_write_extra: "
            "the handler's values are written one way, name one of them"
        )
    return columns


def _refuse_taken(
    model: type, hook: str, columns: Iterable[str], taken: Mapping[str, str]
) -> None:
    """A column a hook names that the engine, the primary key or an earlier hook already
    has would be set twice by one statement (the last one winning on SQLite), letting a
    handler's value or a claim's stamp stand in for the engine's own state or lease."""
    for column in columns:
        if column in taken:
            raise ConfigError(
                f"{model.__name__}.{hook} names {column!r}, which {taken[column]}: "
                "name a column of the model's own"
            )


def _declared_limits(
    model: type, graph: type[StateGraph], table: Table, lease_column: str | None,
    given: Mapping[str, Limit | Sequence[Limit]],
) -> dict[str, list[Limit]]:
    """Each limited state's (``max_running``, key column), checked against the table: the
    graph's, then ``given`` over them.  A limit needs the model's lease column: it is how a
    claim tells a running row (its ``state_next`` still the lease it was given) from one
    merely due later."""
    limits: dict[str, list[Limit]] = {
        s.name: [(s.max_running, s.limit_key)] for s in graph.states.values()
        if s.max_running is not None
    }
    for name, one_or_more in given.items():
        more = [one_or_more] if isinstance(one_or_more, tuple) else list(one_or_more)
        if more:
            limits[name] = more
    for name, (most, key) in ((n, one) for n, all_ in limits.items() for one in all_):
        where = f"{model.__name__}: the limit of {graph.__name__}.{name}"
        state = graph.states.get(name)
        if state is None:
            raise ConfigError(f"{where}: {graph.__name__} has no such state")
        if key is None and len(limits[name]) > 1:
            raise ConfigError(f"{where}: each of a state's several limits needs a limit_key")
        for problem in limit_problems(most, key, state.automatic):
            raise ConfigError(f"{where}: {problem}")
        if lease_column is None:
            raise ConfigError(
                f"{where} (max_running) needs a lease column: add a nullable time column "
                f"(UTCDateTime) and name it in stator_lease_column"
            )
        column = None if key is None else table.c.get(key)
        if key is not None and (column is None or column.nullable):
            raise ConfigError(
                f"{where}: limit_key={key!r} must name a NOT NULL column of {table.name}"
            )
    return limits


def _quoted(quote: Any, limit: Limit) -> Limit:
    most, key = limit
    return most, None if key is None else quote.quote(key)


def label_of(model: Any) -> str:
    """What people call a model, as ``runstator`` and ``stator run --models`` take it:
    Django's ``app_label.Model``, else the class name."""
    meta = getattr(model, "_meta", None)  # a Django model's options
    return str(getattr(meta, "label", None) or model.__name__)
