"""Table and column names that must be quoted: a reserved word (``order``) on both databases,
and a mixed-case name (``Orders``) on PostgreSQL, where unquoted names fold to lower case.
Every piece of hand-built SQL meets them: migrate (adding the Stator columns to an existing
table, the triggers), claim, write-back with history, delete, status and application-side
transitions."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import JSON, String, select, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from stator import State, StateGraph, Stator
from stator.sqlalchemy import StatorMixin


class Quoted(StateGraph):
    new = State()
    held = State(externally_progressed=True)
    done = State(delete_after=60)
    new.transitions_to(held)
    held.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        return cls.held


def model_for(table: str) -> Any:
    class Base(DeclarativeBase):
        pass

    class Row(StatorMixin, Base):
        __tablename__ = table
        state_graph = Quoted
        id: Mapped[int] = mapped_column(primary_key=True)
        group: Mapped[str | None] = mapped_column("group", String(20))  # a reserved word
        state_history: Mapped[list[Any] | None] = mapped_column(JSON)

    return Row


@pytest.mark.parametrize("table", ["order", "Orders"])
def test_reserved_and_mixed_case_names_through_every_statement(backend, clock, table):
    if table == "Orders" and backend.startswith("sqlite"):
        pytest.skip("SQLite compares names case-insensitively: only PostgreSQL folds them")
    Row = model_for(table)
    stator = Stator(backend, [Row], clock=clock)
    try:
        quoted = stator.engine.dialect.identifier_preparer.quote(table)
        with stator.engine.begin() as conn:  # an existing table, before Stator
            conn.execute(text(f'CREATE TABLE {quoted} (id INTEGER PRIMARY KEY, '
                              f'"group" VARCHAR(20), state_history JSON)'))
            conn.execute(text(f"INSERT INTO {quoted} (id, \"group\") VALUES (1, 'a'), (2, 'b')"))
        done = stator.migrate()
        assert any(f"added column {table}.state_next" in line for line in done)
        stator.check()

        report = stator.run_once()  # claim + write-back (with history)
        assert report.claimed == 2 and report.transitions == 2
        with Session(stator.engine) as session:
            rows = session.scalars(select(Row).order_by(Row.id)).all()
            assert [(r.state, r.group) for r in rows] == [("held", "a"), ("held", "b")]
            assert [h[0] for h in rows[0].state_history] == ["held"]
            rows[0].transition_perform(Quoted.done, clock=clock)  # application side
            session.commit()
        assert stator.transition_many(Row, Quoted.done, Row.id == 2) == 1

        states = {s["state"]: s["rows"] for s in stator.status()["models"][0]["states"]}
        assert states == {"new": 0, "held": 0, "done": 2}

        clock.advance(120)
        stator.run_once()  # delete after delete_after
        with Session(stator.engine) as session:
            assert session.scalars(select(Row)).all() == []
        assert stator.migrate() == []  # idempotent, triggers found again
    finally:
        stator.dispose()
