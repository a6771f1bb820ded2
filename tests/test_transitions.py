"""Transitions made by application code: checked against the graph, in the caller's session."""

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from stator import ConfigError, GraphError, State, StateGraph, TransitionConflict, TransitionError


class Orders(StateGraph):
    new = State(externally_progressed=True)
    paid = State(externally_progressed=True)
    shipped = State()
    cancelled = State(delete_after=3600)
    new.transitions_to(paid)
    new.transitions_to(cancelled)
    paid.transitions_to(shipped)
    paid.transitions_to(cancelled)


@pytest.fixture
def orders(backend, clock, make_stator, build_models):
    """A migrated Stator over one ``orders`` table holding rows 1 and 2 in state new."""
    m = build_models(Orders)
    stator = make_stator(backend, [m.Order], clock)
    with Session(stator.engine) as session:
        session.add_all([m.Order(id=1), m.Order(id=2)])
        session.commit()
    return stator, m.Order


def state_of(stator, model, pk):
    with Session(stator.engine) as session:
        return session.scalar(select(model.state).where(model.id == pk))


def test_transition_perform_moves_the_row_and_schedules_it(orders, clock):
    stator, Order = orders
    with Session(stator.engine) as session:
        order = session.get(Order, 1)
        order.transition_perform(Orders.cancelled, clock=clock)
        assert (order.state, order.state_changed, order.state_attempts) == (
            "cancelled", clock.now(), 0,
        )
        session.commit()
    with Session(stator.engine) as session:
        row = session.get(Order, 1)
        assert (row.state, row.state_changed) == ("cancelled", clock.now())
        assert (row.state_next - clock.now()).total_seconds() == 3600  # its deletion
    assert state_of(stator, Order, 2) == "new"


def test_transition_perform_belongs_to_the_callers_transaction(orders, clock):
    stator, Order = orders
    with Session(stator.engine) as session:
        session.get(Order, 1).transition_perform("paid", clock=clock)
        session.rollback()
    assert state_of(stator, Order, 1) == "new"


def test_transition_perform_refuses_a_missing_edge(orders, clock):
    stator, Order = orders
    with Session(stator.engine) as session:
        order = session.get(Order, 1)
        with pytest.raises(TransitionError, match="no transition from new to shipped"):
            order.transition_perform("shipped", clock=clock)
        with pytest.raises(GraphError, match="no state 'lost'"):
            order.transition_perform("lost", clock=clock)
        session.commit()
    assert state_of(stator, Order, 1) == "new"


def test_transition_perform_raises_if_someone_moved_the_row_first(orders, clock):
    stator, Order = orders
    with Session(stator.engine, expire_on_commit=False) as mine:
        stale = mine.get(Order, 1)
        mine.commit()  # end the read, keeping the object with state "new"
        with Session(stator.engine) as theirs:
            theirs.get(Order, 1).transition_perform("cancelled", clock=clock)
            theirs.commit()
        with pytest.raises(TransitionConflict, match="no longer in state new"):
            stale.transition_perform("paid", clock=clock)
        mine.rollback()
    assert state_of(stator, Order, 1) == "cancelled"


def test_transition_perform_needs_a_session(orders, clock):
    _, Order = orders
    with pytest.raises(ConfigError, match="Session"):
        Order(id=3).transition_perform("paid", clock=clock)


def test_stator_transition_many_moves_only_rows_with_an_edge(orders, clock):
    stator, Order = orders
    with Session(stator.engine) as session:
        session.add(Order(id=3))
        session.commit()
    assert stator.transition_many(Order, "paid", Order.id == 2) == 1
    assert stator.transition_many(Order, "shipped") == 1  # only the paid row has the edge
    assert stator.transition_many(Order, "cancelled") == 2  # rows 1 and 3; shipped stays
    assert [state_of(stator, Order, pk) for pk in (1, 2, 3)] == [
        "cancelled", "shipped", "cancelled",
    ]


def test_model_transition_many_runs_in_the_callers_session(orders, clock):
    stator, Order = orders
    with Session(stator.engine) as session:
        assert Order.transition_many(session, Orders.paid, Order.id == 1, clock=clock) == 1
        session.rollback()
    assert state_of(stator, Order, 1) == "new"
    with Session(stator.engine) as session:
        assert Order.transition_many(session, "paid", clock=clock) == 2
        session.commit()
    assert [state_of(stator, Order, pk) for pk in (1, 2)] == ["paid", "paid"]


def test_transition_many_into_the_initial_state_is_refused(orders):
    stator, Order = orders
    with pytest.raises(TransitionError, match="no state has a transition to new"):
        stator.transition_many(Order, "new")


def test_transition_many_rejects_a_foreign_model(orders, build_models):
    stator, _ = orders
    other = build_models(Orders, table="others").Order
    with pytest.raises(ConfigError, match="not one of this Stator's models"):
        stator.transition_many(other, "paid")


def test_transition_perform_in_a_stale_read_transaction_is_a_conflict(orders, clock):
    """The application read inside an open transaction, someone else committed meanwhile:
    on either backend the caller learns it lost the race (never a silent overwrite)."""
    stator, Order = orders
    with Session(stator.engine) as mine:
        stale = mine.get(Order, 1)  # the read transaction stays open
        with Session(stator.engine) as theirs:
            theirs.get(Order, 1).transition_perform("cancelled", clock=clock)
            theirs.commit()
        with pytest.raises(TransitionConflict):
            stale.transition_perform("paid", clock=clock)
        mine.rollback()
    assert state_of(stator, Order, 1) == "cancelled"
