"""A row the engine cannot read costs that row, never the worker (issue 20, item 7).

Garbage in a Stator column, written by raw SQL, a migration or another tool: text in a
SQLite timestamp, a PostgreSQL ``infinity`` or year past 9999 (valid to the server, out of
Python's range), a ``state_attempts`` that is not a number.  The row is recorded as an error
(kind ``unreadable``, naming the column), set aside for an hour with one more attempt
counted, and every other row keeps moving; ``stator status`` reads past it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import text

from stator import State, StateGraph
from stator._store._unreadable import SET_ASIDE
from stator._types import UTCDateTime


class Steps(StateGraph):
    new = State(retry_after=60)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        return cls.done


# (column, SQL value) a row cannot be read with, per backend.
GARBAGE = {
    "sqlite": [("state_changed", "'garbage'"), ("state_attempts", "'abc'")],
    "postgresql": [("state_changed", "'infinity'"), ("state_changed", "'20000-01-01'")],
}


def poisoned(build_models, make_stator, backend, clock, column: str, value: str) -> Any:
    """A Stator with rows 1-5 due, row 3 holding ``value`` in ``column``."""
    stator = make_stator(backend, [build_models(Steps).Order], clock)
    with stator.engine.begin() as conn:
        conn.execute(text("INSERT INTO orders (id) VALUES (1), (2), (3), (4), (5)"))
        conn.execute(text(f"UPDATE orders SET {column} = {value} WHERE id = 3"))
    return stator


def states(stator: Any) -> dict[int, tuple[str, int]]:
    with stator.engine.connect() as conn:
        rows = conn.execute(text("SELECT id, state, state_attempts FROM orders"))
        return {pk: (state, attempts) for pk, state, attempts in rows}


def kind_of_backend(backend: str) -> str:
    return "sqlite" if backend.startswith("sqlite") else "postgresql"


@pytest.mark.parametrize("case", [0, 1])
def test_a_row_that_cannot_be_read_is_recorded_and_set_aside_and_the_rest_run(
    backend, build_models, make_stator, clock, case
):
    column, value = GARBAGE[kind_of_backend(backend)][case]
    stator = poisoned(build_models, make_stator, backend, clock, column, value)
    summary = stator.worker(until_idle=True, idle_window=0).run()
    assert summary.reason == "idle"
    found = states(stator)
    assert {pk: s for pk, (s, _) in found.items() if pk != 3} == dict.fromkeys(
        [1, 2, 4, 5], "done")
    assert found[3] == ("new", 1)  # one attempt counted: "failing" in status and dashboard
    with stator.engine.connect() as conn:
        held = conn.execute(text("SELECT state_next FROM orders WHERE id = 3")).scalar()
    assert UTCDateTime().process_result_value(held, stator.engine.dialect) == (
        clock.now() + SET_ASIDE)
    report = stator.status()
    [error] = report["errors"]
    assert (error["row_pk"], error["state"], error["kind"], error["attempt"]) == (
        "3", "new", "unreadable", 1)
    assert column in error["message"] and "retry the row" in error["message"]
    [new] = [s for s in report["models"][0]["states"] if s["state"] == "new"]
    assert new["failing"] == 1 and new["due"] == 0


def test_run_once_sets_an_unreadable_row_aside_too(backend, build_models, make_stator, clock):
    column, value = GARBAGE[kind_of_backend(backend)][0]
    stator = poisoned(build_models, make_stator, backend, clock, column, value)
    report = stator.run_once()
    assert report.claimed == 4 and report.transitions == 4
    assert states(stator)[3] == ("new", 1)


# A due time the database compares as due but Python cannot read: the claim replaces it with
# a lease; until then, the readers of due times must not fail on it.
DUE_GARBAGE = {"sqlite": "'1999'", "postgresql": "'-infinity'"}


def test_status_and_the_idle_check_read_past_a_due_time_they_cannot_read(
    backend, build_models, make_stator, clock
):
    value = DUE_GARBAGE[kind_of_backend(backend)]
    stator = poisoned(build_models, make_stator, backend, clock, "state_next", value)
    report = stator.status()
    # Every state is listed (empty ones at zero); the poisoned rows are all in ``new``.
    [new] = [s for s in report["models"][0]["states"] if s["state"] == "new"]
    assert new["rows"] == 5 and new["due"] == 5
    due = stator.store.next_due(stator.store.tracked)
    assert due is not None and due <= clock.now()
    stator.worker(until_idle=True, idle_window=0).run()
    assert all(state != "new" or pk == 3 for pk, (state, _) in states(stator).items())
    stator.status()


def test_a_row_in_a_state_the_graph_does_not_know_is_left_alone_and_listed(
    backend, build_models, make_stator, clock
):
    stator = poisoned(build_models, make_stator, backend, clock, "state", "'vanished'")
    summary = stator.worker(until_idle=True, idle_window=0).run()
    assert summary.reason == "idle"
    assert states(stator) == {1: ("done", 0), 2: ("done", 0), 3: ("vanished", 0),
                              4: ("done", 0), 5: ("done", 0)}
    listed = {s["state"]: s for s in stator.status()["models"][0]["states"]}
    assert listed["vanished"]["rows"] == 1 and not listed["vanished"]["known"]


# A state_history the database cannot take the transition into: garbage text on SQLite (the
# claim cannot read it), a NUL escape in a PostgreSQL json value (accepted, then refused by
# the jsonb append of the write-back: the whole batch failed with it).
BAD_HISTORY = {"sqlite": "'garbage'", "postgresql": """'["\\u0000"]'"""}


def test_a_row_whose_history_the_database_refuses_costs_that_row_only(
    backend, build_models, make_stator, clock
):
    stator = make_stator(backend, [build_models(Steps, history=True).Order], clock)
    with stator.engine.begin() as conn:
        conn.execute(text("INSERT INTO orders (id) VALUES (1), (2), (3), (4), (5)"))
        conn.execute(text(
            f"UPDATE orders SET state_history = {BAD_HISTORY[kind_of_backend(backend)]} "
            "WHERE id = 3"
        ))
    summary = stator.worker(until_idle=True, idle_window=0).run()
    assert summary.reason == "idle"
    found = states(stator)
    assert found.pop(3) == ("new", 1)
    assert found == dict.fromkeys([1, 2, 4, 5], ("done", 0))
    [error] = stator.status()["errors"]
    assert (error["row_pk"], error["kind"]) == ("3", "unreadable")
    assert "state_history" in error["message"]


@pytest.mark.parametrize("history", ["'{}'", "'5'", "'null'"])
def test_a_history_that_is_json_but_not_a_list_keeps_it_and_gains_the_move(
    backend, build_models, make_stator, clock, history
):
    """As PostgreSQL's ``||`` does, SQLite makes such a history the first element of a list
    (its json_insert would silently leave the object as it was, the move unrecorded)."""
    stator = make_stator(backend, [build_models(Steps, history=True).Order], clock)
    with stator.engine.begin() as conn:
        conn.execute(text("INSERT INTO orders (id) VALUES (1), (2)"))
        conn.execute(text(f"UPDATE orders SET state_history = {history} WHERE id = 1"))
    stator.worker(until_idle=True, idle_window=0).run()
    assert states(stator) == {1: ("done", 0), 2: ("done", 0)}
    with stator.engine.connect() as conn:
        found = conn.execute(text("SELECT state_history FROM orders WHERE id = 1")).scalar()
    found = json.loads(found) if isinstance(found, str) else found
    assert found[0] == json.loads(history.strip("'"))
    assert [entry[0] for entry in found[1:]] == ["done"]
