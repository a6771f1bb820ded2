"""The one move rule, without a database: which rows may move, and what they become."""

from datetime import UTC, datetime, timedelta

import pytest

from stator import GraphError, State, StateGraph, TransitionError
from stator._moves import along_edge, into, retryable

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)


class Orders(StateGraph):
    new = State(externally_progressed=True)
    paid = State(externally_progressed=True)
    shipped = State(start_after=30)
    delivered = State()
    cancelled = State(delete_after=3600)
    shipped.transitions_to(delivered)
    new.transitions_to(paid)
    new.transitions_to(cancelled)
    paid.transitions_to(shipped)
    paid.transitions_to(cancelled)

    @classmethod
    def check_shipped(cls, instance: object) -> None:
        return None


def test_a_row_moves_along_an_edge_from_the_state_it_was_seen_in() -> None:
    move = along_edge(Orders, "paid", Orders.shipped, NOW)
    assert move.sources == ("paid",)
    assert move.values == {"state": "shipped", "state_changed": NOW,
                           "state_next": NOW + timedelta(seconds=30), "state_attempts": 0}
    assert move.history_entry == ("shipped", NOW.isoformat())


@pytest.mark.parametrize(("current", "to"), [("new", "shipped"), ("gone", "paid"),
                                             ("new", "nowhere")])
def test_a_move_without_an_edge_is_refused_with_the_states_named(current: str, to: str) -> None:
    with pytest.raises(TransitionError, match=f"Orders: no transition from {current} to {to}"):
        along_edge(Orders, current, to, NOW)


def test_many_rows_move_from_every_parent_of_the_target() -> None:
    move = into(Orders, "cancelled", NOW)
    assert sorted(move.sources) == ["new", "paid"]
    assert move.values["state_next"] == NOW + timedelta(hours=1)  # due for its deletion
    with pytest.raises(TransitionError, match="no state has a transition to new"):
        into(Orders, "new", NOW)
    with pytest.raises(GraphError):
        into(Orders, "nowhere", NOW)


def test_only_rows_the_engine_runs_can_be_retried() -> None:
    retryable(Orders, "shipped")
    with pytest.raises(TransitionError, match="rows in paid are not run by the engine"):
        retryable(Orders, "paid")
