"""Claimed rows become ORM objects without the ORM's loader (``_store._Loader``): the objects
must behave exactly like loaded ones in the handler's session."""

from typing import Any

from sqlalchemy import String
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, reconstructor

from stator import State, StateGraph
from stator.sqlalchemy import StatorMixin

seen: dict[str, Any] = {}


class Noting(StateGraph):
    new = State()
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        session = Session.object_session(row)
        seen["attached"] = session is not None
        seen["clean"] = session is not None and row not in session.dirty
        seen["values"] = (row.id, row.note, row.state)
        seen["rebuilt"] = getattr(row, "rebuilt", False)
        row.note = "changed by the handler"  # a write: committed with the transition
        return cls.done


def _models(with_reconstructor: bool) -> Any:
    class Base(DeclarativeBase):
        pass

    class Order(StatorMixin, Base):
        __tablename__ = "claim_objects"
        state_graph = Noting
        id: Mapped[int] = mapped_column(primary_key=True)
        note: Mapped[str | None] = mapped_column(String(100))

        if with_reconstructor:
            @reconstructor
            def _loaded(self) -> None:
                self.rebuilt = True

    return Order


def _run(backend: str, clock: Any, make_stator: Any, with_reconstructor: bool) -> Any:
    seen.clear()
    order = _models(with_reconstructor)
    stator = make_stator(backend, [order], clock)
    with Session(stator.engine) as session:
        session.add(order(id=7, note="as inserted"))
        session.commit()
    assert stator.run_once().claimed == 1
    with Session(stator.engine) as session:
        row = session.get(order, 7)
        assert row is not None
        return row.state, row.note


def test_claimed_objects_are_clean_attached_and_complete(backend, clock, make_stator):
    state, note = _run(backend, clock, make_stator, with_reconstructor=False)
    assert seen == {"attached": True, "clean": True, "values": (7, "as inserted", "new"),
                    "rebuilt": False}
    assert (state, note) == ("done", "changed by the handler")


def test_models_with_load_hooks_still_get_them(backend, clock, make_stator):
    """A ``@reconstructor`` runs for claimed rows (they go through the ORM's loader)."""
    state, _note = _run(backend, clock, make_stator, with_reconstructor=True)
    assert seen["rebuilt"] is True
    assert state == "done"


class PlainNoting(StateGraph):
    plain_rows = True
    new = State()
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        seen["type"] = type(row)
        seen["values"] = (row.id, row.note, row.state)
        return cls.done


def test_a_model_with_load_hooks_still_gets_plain_rows_where_asked(backend, clock, make_stator):
    """A plain row is no model instance: the ORM's loader (run for the reconstructor) is
    not what its handler gets."""
    from stator._plain_rows import PlainRow

    order = _models(with_reconstructor=True)
    order.state_graph = PlainNoting
    stator = make_stator(backend, [order], clock)
    with Session(stator.engine) as session:
        session.add(order(id=7, note="as inserted"))
        session.commit()
    seen.clear()
    assert stator.run_once().transitions == 1
    assert issubclass(seen["type"], PlainRow)
    assert seen["values"] == (7, "as inserted", "new")
