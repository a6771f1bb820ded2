"""``StatorMixin``: the columns and methods a SQLAlchemy model needs to be run by Stator.

The columns carry server defaults as well as Python ones, so a row inserted by any route
(an ORM object, a Core bulk ``insert()``, raw SQL naming no Stator column) starts in the
graph's initial state and is due at once, or after that state's ``start_after``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, Index, Integer, String, text
from sqlalchemy.orm import Mapped, Session, declared_attr, mapped_column

from ._clock import Clock, SystemClock
from ._graph import State, StateGraph
from ._policy import first_due
from ._store._schema import STATOR_COLUMNS
from ._types import UTCDateTime, utc_now_plus
from .errors import ConfigError, GraphError

CLAIM_INDEX_WHERE = "state_next IS NOT NULL"
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


class StatorMixin:
    """Mix into a declarative model and set ``state_graph`` to its graph class.

    Adds ``state``, ``state_changed``, ``state_next`` (NULL once the engine has nothing more
    to do for the row, which keeps it out of the claim index) and ``state_attempts``
    (consecutive failures, for backoff and ``max_attempts``).  Declare a nullable JSON
    ``state_history`` column to have every transition appended to it.
    """

    state_graph: ClassVar[type[StateGraph]]

    @declared_attr
    def state(cls) -> Mapped[str]:
        initial = _graph_of(cls).initial_state.name
        return mapped_column(String(100), nullable=False, default=initial, server_default=initial)

    @declared_attr
    def state_changed(cls) -> Mapped[datetime]:
        return mapped_column(UTCDateTime(), nullable=False, server_default=utc_now_plus())

    @declared_attr
    def state_next(cls) -> Mapped[datetime | None]:
        initial = _graph_of(cls).initial_state
        # When a new row first needs the engine: its handler, or a deletion or timeout.
        due = first_due(initial, _EPOCH)
        default = None if due is None else utc_now_plus((due - _EPOCH).total_seconds())
        return mapped_column(UTCDateTime(), nullable=True, server_default=default)

    @declared_attr
    def state_attempts(cls) -> Mapped[int]:
        return mapped_column(Integer, nullable=False, default=0, server_default=text("0"))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table = getattr(cls, "__table__", None)
        if table is None or "state_next" not in table.c:
            return
        index_name = f"ix_{table.name}_stator_due"
        if not any(ix.name == index_name for ix in table.indexes):
            Index(
                index_name, table.c.state, table.c.state_next,
                sqlite_where=text(CLAIM_INDEX_WHERE), postgresql_where=text(CLAIM_INDEX_WHERE),
            )
        # A limit per key: the claim probes each key's due rows by this index (one probe per
        # key, however many rows wait: ``_limit_statements``).
        for key in {s.limit_key for s in _graph_of(cls).states.values() if s.limit_key}:
            name = f"ix_{table.name}_stator_{key}"
            if key in table.c and not any(ix.name == name for ix in table.indexes):
                Index(
                    name, table.c.state, table.c[key], table.c.state_next,
                    sqlite_where=text(CLAIM_INDEX_WHERE),
                    postgresql_where=text(CLAIM_INDEX_WHERE),
                )

    def transition_perform(self, to: State | str, *, clock: Clock | None = None) -> None:
        """Move this row to ``to`` now, inside the caller's own session and transaction.

        Checked against the graph.  The write is conditional on the row still being in the
        state this object shows, so it cannot silently undo a worker's transition: if the
        row moved meanwhile, ``TransitionConflict`` is raised.  Workers are woken when the
        caller commits.
        """
        from ._store import transitions

        session = Session.object_session(self)
        if session is None:
            raise ConfigError("transition_perform needs the object to be in a Session")
        transitions.perform(session, self, to, (clock or SystemClock()).now())

    @classmethod
    def transition_many(
        cls,
        session: Session,
        to: State | str,
        *where: ColumnElement[bool],
        clock: Clock | None = None,
    ) -> int:
        """Move every row matching ``where`` (and in a state with an edge to ``to``) at once.

        Runs in the caller's transaction; returns how many rows moved.
        """
        from ._store import transitions

        return transitions.perform_many(session, cls, to, where, (clock or SystemClock()).now())


def _graph_of(cls: Any) -> type[StateGraph]:
    graph = getattr(cls, "state_graph", None)
    if not (isinstance(graph, type) and issubclass(graph, StateGraph)):
        raise GraphError(f"{cls.__name__}: set state_graph = <a StateGraph subclass> on the model")
    return graph


# UTCDateTime: the column type of Stator's times, for a model's own (a lease column).
__all__ = ["CLAIM_INDEX_WHERE", "STATOR_COLUMNS", "StatorMixin", "UTCDateTime"]
