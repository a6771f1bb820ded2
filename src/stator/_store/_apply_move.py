"""The one applying part of a move made outside a handler (see ``stator._moves``).

A move is one conditional UPDATE: rows change only if they are still in a state the move
may leave (and meet the caller's fence), so a move racing a worker or another operator is
never a silent mix of both.  The history entry is appended by the dialect's own expression,
and the wake-up NOTIFY rides in the same transaction.  Waking this process's workers after
the commit is the caller's part, since only the caller knows who commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import ColumnElement, Connection, Table, text, update
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import OperationalError

from .._moves import Move
from ..errors import TransitionConflict
from . import _wake_sender
from ._dialects import SqlDialect


class MoveTable(Protocol):
    """What a move needs to know of a table (a ``TrackedModel`` is one)."""

    @property
    def table(self) -> Table: ...

    @property
    def quoted_table(self) -> str: ...

    @property
    def history_type(self) -> str | None: ...


@dataclass(frozen=True)
class PlainTable:
    """A ``MoveTable`` for a mapped table no store tracks (application code's own models)."""

    table: Table
    quoted_table: str
    history_type: str | None

    @classmethod
    def of(cls, table: Table, dialect: Dialect) -> PlainTable:
        history = table.c.get("state_history")
        return cls(
            table, dialect.identifier_preparer.format_table(table),
            None if history is None else history.type.compile(dialect),
        )


def history_expression(
    dialect: SqlDialect, quoted_table: str, history_type: str, placeholder: str = ":{}"
) -> str:
    """The SQL of ``state_history`` with the move's entry appended, its two values bound as
    ``placeholder`` spells them (``:stator_to``/``:stator_iso``, or ``CAST(%s AS text)``)."""
    return dialect.history_append(quoted_table, history_type,
                                  placeholder.format("stator_to"), placeholder.format("stator_iso"))


def stale(table: str) -> TransitionConflict:
    """The conflict a stale read snapshot means (see ``SqlDialect.stale_snapshot``)."""
    return TransitionConflict(
        f"{table}: the database changed since this transaction began reading; "
        "roll back and try the transition in a new transaction"
    )


def apply(
    conn: Connection, dialect: SqlDialect, t: MoveTable, move: Move,
    where: Sequence[ColumnElement[bool]] = (),
) -> int:
    """Apply ``move`` to the rows of ``t`` that are in one of its sources and meet ``where``
    (the caller's rows and fence), in ``conn``'s transaction; how many moved."""
    table = t.table
    values: dict[str, Any] = move.values
    if t.history_type is not None:
        to, iso = move.history_entry
        values["state_history"] = text(
            history_expression(dialect, t.quoted_table, t.history_type)
        ).bindparams(stator_to=to, stator_iso=iso)
    statement = update(table).where(table.c.state.in_(move.sources), *where).values(**values)
    try:
        moved = int(conn.execute(statement).rowcount)
    except OperationalError as exc:
        if dialect.stale_snapshot(str(exc.orig)):
            raise stale(table.name) from exc
        raise
    if moved:
        _wake_sender.notify(conn, dialect, table.name)
    return moved
