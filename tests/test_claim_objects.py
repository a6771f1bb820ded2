"""Claimed rows become ORM objects without the ORM's loader (``_store._Loader``): the objects
must behave exactly like loaded ones in the handler's session."""

from datetime import UTC
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


class Typed(StateGraph):
    new = State()
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        seen["values"] = {name: getattr(row, name) for name in _TYPED}
        seen["lease"] = row.state_next
        return cls.done


_TYPED = ("flag", "data", "naive", "amount", "blob", "colour", "upper", "state_changed",
          "state_attempts")  # and state_next, which the claim sets (the lease)


def _typed_model() -> Any:
    import decimal
    import enum

    from sqlalchemy import JSON, Boolean, DateTime, Enum, LargeBinary, Numeric
    from sqlalchemy.types import TypeDecorator

    class Colour(enum.Enum):
        red = 1
        blue = 2

    class Upper(TypeDecorator[str]):
        impl = String(20)
        cache_ok = True

        def process_result_value(self, value: Any, dialect: Any) -> Any:
            return None if value is None else value.upper()

    class Base(DeclarativeBase):
        pass

    class Item(StatorMixin, Base):
        __tablename__ = "claim_typed"
        state_graph = Typed
        id: Mapped[int] = mapped_column(primary_key=True)
        flag: Mapped[bool] = mapped_column(Boolean)
        data: Mapped[Any] = mapped_column(JSON)
        naive: Mapped[Any] = mapped_column(DateTime)
        amount: Mapped[decimal.Decimal] = mapped_column(Numeric(10, 2))
        blob: Mapped[bytes] = mapped_column(LargeBinary)
        colour: Mapped[Colour] = mapped_column(Enum(Colour))
        upper: Mapped[str] = mapped_column(Upper)

    item = Item(id=3, flag=True, data={"a": [1, 2]}, amount=decimal.Decimal("12.50"),
                blob=b"\x00\x01", colour=Colour.blue, upper="quiet")
    item.naive = __import__("datetime").datetime(2026, 1, 2, 3, 4, 5)
    return Item, item


def test_a_claimed_row_holds_the_values_the_orm_loads(backend, clock, make_stator):
    """Whichever way a claim reads its rows (the DB-API cursor, ``_raw_claim``, on both
    databases), the handler sees every column as the ORM itself loads it."""
    model, item = _typed_model()
    stator = make_stator(backend, [model], clock)
    with Session(stator.engine) as session:
        session.add(item)
        session.commit()
        loaded = session.get(model, 3)
        expected = {name: getattr(loaded, name) for name in _TYPED}
    [tracked] = stator.store.tracked
    assert stator.store._loader(tracked).raw is not None  # the raw path is what runs
    seen.clear()
    assert stator.run_once().transitions == 1
    assert seen["values"] == expected
    assert [type(v) for v in seen["values"].values()] == [type(v) for v in expected.values()]
    assert seen["lease"].tzinfo is UTC and seen["lease"] > expected["state_changed"]


def test_a_claims_rows_convert_their_shared_lease_once() -> None:
    """The lease column's text, the same in every row of a claim's state, is converted
    once per claim; every other column once per row (``_raw_claim.row_converter``)."""
    from stator._store._raw_claim import row_converter

    calls: list[str] = []

    def parse(value: str) -> object:
        calls.append(value)
        return object()

    convert = row_converter([None, parse, parse], shared=2)
    assert convert is not None
    seen: dict[Any, Any] = {}
    first, second = convert((1, "a", "lease"), seen), convert((2, "b", "lease"), seen)
    assert first[0] == 1 and second[0] == 2
    assert first[2] is second[2] and first[1] is not second[1]
    assert calls == ["a", "lease", "b"]
    assert row_converter([None, None]) is None  # nothing to convert: rows used as read


def test_the_engines_cursor_events_see_the_claim(backend, clock, make_stator):
    """The claim on the DB-API cursor (``_raw_claim``) still fires the engine's cursor
    events, before and after, so what listens to them (statement counters, tracing, SQL
    logs) sees the claim as it sees every other statement."""
    from sqlalchemy import event

    order = _models(with_reconstructor=False)
    stator = make_stator(backend, [order], clock)
    [tracked] = stator.store.tracked
    raw = stator.store._loader(tracked).raw
    assert raw is not None
    before: list[str] = []
    after: list[str] = []
    event.listen(stator.engine, "before_cursor_execute",
                 lambda conn, cursor, sql, *rest: before.append(sql))
    event.listen(stator.engine, "after_cursor_execute",
                 lambda conn, cursor, sql, *rest: after.append(sql))
    with Session(stator.engine) as session:
        session.add(order(id=7, note="as inserted"))
        session.commit()
    assert stator.run_once().claimed == 1
    assert before.count(raw.sql) == 1 and after.count(raw.sql) == 1
