"""The engine end to end, one ``run_once`` at a time under a manual clock, on every
integration and database (tests/engine/conftest.py).  Where a test acts as the application
(inserting, reading or moving rows), it goes through ``app_side``, which speaks the ORM of
the Stator at hand.
"""

import asyncio
from datetime import datetime, timedelta

import pytest
from app_side import (
    add,
    add_many,
    create_table,
    due_in,
    errors,
    load,
    move,
    move_elsewhere,
    move_many,
    run_sql,
    states_of,
    texts,
    write_in_handler,
)

from stator import State, StateGraph, TransitionError, TryAgainLater
from stator._policy import Moved, after_run, before_run


class OneStep(StateGraph):
    new = State()
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, order):
        return cls.done


# -- new rows ----------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["orm", "bulk", "sql"])
def test_new_rows_start_in_the_initial_state_and_are_due_at_once(
    backend, clock, make_stator, build_models, route
):
    """However a row is inserted, the columns' defaults schedule it without Stator's help."""
    m = build_models(OneStep)
    stator = make_stator(backend, [m.Order], clock)
    if route == "orm":
        add(stator, m.Order(id=1))
    elif route == "bulk":
        add_many(stator, m.Order, [{"id": 1, "note": "bulk"}])
    else:
        run_sql(stator, "INSERT INTO orders (id, note) VALUES (1, 'raw')")

    row = load(stator, m.Order, 1)
    assert (row.state, row.state_attempts) == ("new", 0)
    assert row.state_next is not None and row.state_next <= clock.now()

    report = stator.run_once()
    assert (report.claimed, report.transitions) == (1, 1)
    assert load(stator, m.Order, 1).state == "done"
    assert load(stator, m.Order, 1).state_next is None


@pytest.mark.parametrize("route", ["orm", "sql"])
def test_start_after_delays_the_first_attempt(backend, clock, make_stator, build_models, route):
    class Delayed(StateGraph):
        new = State(start_after=600)
        done = State()
        new.transitions_to(done)

        @classmethod
        def check_new(cls, order):
            return cls.done

    m = build_models(Delayed)
    stator = make_stator(backend, [m.Order], clock)
    if route == "orm":
        add(stator, m.Order(id=1))
    else:
        run_sql(stator, "INSERT INTO orders (id) VALUES (1)")

    assert stator.run_once().claimed == 0
    clock.advance(500)  # the clock started a minute ahead of the insert
    assert stator.run_once().claimed == 0
    clock.advance(100)
    assert stator.run_once().claimed == 1
    assert load(stator, m.Order, 1).state == "done"


def test_a_long_start_after_is_scheduled_exactly(backend, clock, make_stator, build_models):
    """The server default must spell large delays exactly (not 1.23457e+06) on both backends."""

    class Slow(StateGraph):
        new = State(start_after=1_234_567.5)
        done = State()
        new.transitions_to(done)

        @classmethod
        def check_new(cls, order):
            return cls.done

    m = build_models(Slow)
    stator = make_stator(backend, [m.Order], clock)
    run_sql(stator, "INSERT INTO orders (id) VALUES (1)")
    row = load(stator, m.Order, 1)
    assert row.state_next - row.state_changed == timedelta(seconds=1_234_567.5)


def test_a_string_primary_key_works(backend, clock, make_stator, build_models):
    """Moves, retries and errors are all written back by key; keys need not be integers."""

    class ByNote(StateGraph):
        new = State(retry_after=10)
        done = State()
        new.transitions_to(done)

        @classmethod
        def check_new(cls, order):
            if order.note == "bad":
                raise RuntimeError("bad order")
            return cls.done if order.note == "go" else None

    m = build_models(ByNote, string_pk=True)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id="order-é", note="go"), m.Order(id="o-2"), m.Order(id="o-3", note="bad"))

    with pytest.raises(RuntimeError):
        stator.run_once()
    assert load(stator, m.Order, "order-é").state == "done"
    assert due_in(stator, m.Order, "o-2") == 10
    assert load(stator, m.Order, "o-3").state_attempts == 1
    assert [e["row_pk"] for e in errors(stator)] == ["o-3"]


def test_rows_in_states_the_graph_does_not_know_are_left_alone(
    backend, clock, make_stator, build_models
):
    m = build_models(OneStep)
    stator = make_stator(backend, [m.Order], clock)
    run_sql(stator, "INSERT INTO orders (id, state) VALUES (1, 'legacy')")

    assert stator.run_once().claimed == 0
    legacy = states_of(stator)["legacy"]
    assert (legacy["role"], legacy["known"], legacy["rows"]) == ("unknown", False, 1)


# -- staying, retrying, failing ----------------------------------------------------------------


def test_returning_none_retries_after_retry_after_and_not_before(
    backend, clock, make_stator, build_models
):
    calls = []

    class Polling(StateGraph):
        new = State(retry_after=100)
        done = State()
        new.transitions_to(done)

        @classmethod
        def check_new(cls, order):
            calls.append(clock.now())
            return None

    m = build_models(Polling)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id=1))

    stator.run_once()
    row = load(stator, m.Order, 1)
    assert (row.state, row.state_attempts) == ("new", 0)
    assert row.state_next == clock.now() + timedelta(seconds=100)
    clock.advance(99)
    assert stator.run_once().claimed == 0
    clock.advance(1)
    assert stator.run_once().claimed == 1
    assert len(calls) == 2
    assert errors(stator) == []


def test_try_again_later_sets_its_own_delay_and_costs_no_attempt(
    backend, clock, make_stator, build_models
):
    """With max_attempts=1 a single counted failure would exhaust the row; TryAgainLater not."""

    class Waiting(StateGraph):
        new = State(retry_after=1000, max_attempts=1)
        done = State()
        broken = State()
        new.transitions_to(done)
        new.fails_to(broken)

        @classmethod
        def check_new(cls, order):
            raise TryAgainLater(5)

    m = build_models(Waiting)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id=1))

    stator.run_once()  # does not raise: not an error
    row = load(stator, m.Order, 1)
    assert (row.state, row.state_attempts) == ("new", 0)
    assert due_in(stator, m.Order, 1) == 5
    clock.advance(5)
    assert stator.run_once().claimed == 1
    assert load(stator, m.Order, 1).state == "new"
    assert errors(stator) == []


def test_not_yet_between_failures_keeps_the_failure_count(
    backend, clock, make_stator, build_models
):
    """Failures separated by TryAgainLater are still consecutive as far as max_attempts goes."""
    calls = []

    class Alternating(StateGraph):
        new = State(retry_after=10, max_attempts=2)
        done = State()
        broken = State()
        new.transitions_to(done)
        new.fails_to(broken)

        @classmethod
        def check_new(cls, order):
            calls.append(order.id)
            if len(calls) % 2 == 0:
                raise TryAgainLater(1)
            raise RuntimeError("fails")

    m = build_models(Alternating)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id=1))

    with pytest.raises(RuntimeError):
        stator.run_once()
    clock.advance(20)
    stator.run_once()  # not yet
    assert load(stator, m.Order, 1).state_attempts == 1
    clock.advance(1)
    with pytest.raises(RuntimeError):
        stator.run_once()
    assert load(stator, m.Order, 1).state == "broken"
    assert len(calls) == 3


def test_exceptions_count_attempts_back_off_and_are_recorded(
    backend, clock, make_stator, build_models
):
    class Flaky(StateGraph):
        new = State(retry_after=100, backoff=2)
        done = State()
        new.transitions_to(done)

        @classmethod
        def check_new(cls, order):
            raise RuntimeError(f"boom at {len(errors(stator)) + 1}")

    m = build_models(Flaky)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id=1))

    with pytest.raises(RuntimeError, match="boom at 1"):
        stator.run_once()
    row = load(stator, m.Order, 1)
    assert (row.state, row.state_attempts) == ("new", 1)  # written before re-raising
    assert 90 <= due_in(stator, m.Order, 1) <= 110

    (error,) = errors(stator)
    assert error["message"] == "RuntimeError: boom at 1"
    assert "Traceback" in error["traceback"] and "check_new" in error["traceback"]
    assert (error["table"], error["row_pk"], error["state"]) == ("orders", "1", "new")
    # Named as people name the model: its class, or Django's app.Model.
    assert error["model"] == (m.Order._meta.label if hasattr(m.Order, "_meta") else "Order")
    assert (error["kind"], error["attempt"]) == ("error", 1)

    clock.set(row.state_next - timedelta(seconds=1))
    assert stator.run_once().claimed == 0
    clock.set(row.state_next)
    with pytest.raises(RuntimeError, match="boom at 2"):
        stator.run_once()
    assert load(stator, m.Order, 1).state_attempts == 2
    assert 180 <= due_in(stator, m.Order, 1) <= 220
    assert [e["attempt"] for e in errors(stator)] == [2, 1]
    assert states_of(stator)["new"]["failing"] == 1


def test_exhausted_rows_move_to_the_fails_to_state(backend, clock, make_stator, build_models):
    class Doomed(StateGraph):
        new = State(retry_after=10, max_attempts=2)
        done = State()
        broken = State()
        new.transitions_to(done)
        new.fails_to(broken)

        @classmethod
        def check_new(cls, order):
            raise ValueError("never works")

    m = build_models(Doomed)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id=1))

    with pytest.raises(ValueError):
        stator.run_once()
    assert load(stator, m.Order, 1).state == "new"
    clock.advance(20)
    with pytest.raises(ValueError):
        stator.run_once()
    row = load(stator, m.Order, 1)
    assert (row.state, row.state_attempts, row.state_next) == ("broken", 0, None)

    states = states_of(stator)
    assert states["broken"]["role"] == "exhausted"
    assert states["broken"]["rows"] == 1
    assert states["new"]["rows"] == 0  # every state is listed, an empty one at zero
    assert [e["attempt"] for e in errors(stator)] == [2, 1]


def test_an_undeclared_target_is_an_error_and_releases_the_row(
    backend, clock, make_stator, build_models
):
    """The row stays put, and is due again after backoff rather than after its long lease."""

    class Wrong(StateGraph):
        new = State(retry_after=10, timeout=1000)
        review = State(externally_progressed=True)
        done = State()
        new.transitions_to(review)
        review.transitions_to(done)

        @classmethod
        def check_new(cls, order):
            return "done"

    m = build_models(Wrong)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id=1))

    with pytest.raises(TransitionError, match="may only move to review"):
        stator.run_once()
    row = load(stator, m.Order, 1)
    assert (row.state, row.state_attempts) == ("new", 1)
    assert 9 <= due_in(stator, m.Order, 1) <= 11
    (error,) = errors(stator)
    assert error["kind"] == "invalid"
    assert "'done'" in error["message"]

    clock.advance(11)
    with pytest.raises(TransitionError):
        stator.run_once()


def test_async_handlers_work(backend, clock, make_stator, build_models):
    class Async(StateGraph):
        new = State()
        done = State()
        new.transitions_to(done)

        @classmethod
        async def check_new(cls, order):
            await asyncio.sleep(0)
            return cls.done if order.note == "go" else None

    m = build_models(Async)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id=1, note="go"), m.Order(id=2))

    assert stator.run_once().transitions == 1
    assert load(stator, m.Order, 1).state == "done"
    assert load(stator, m.Order, 2).state == "new"


def test_async_handler_errors_are_recorded(backend, clock, make_stator, build_models):
    class AsyncFlaky(StateGraph):
        new = State()
        done = State()
        new.transitions_to(done)

        @classmethod
        async def check_new(cls, order):
            raise KeyError("missing")

    m = build_models(AsyncFlaky)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id=1))

    with pytest.raises(KeyError):
        stator.run_once()
    assert load(stator, m.Order, 1).state_attempts == 1
    assert errors(stator)[0]["message"] == "KeyError: 'missing'"


# -- deletion and timeouts ---------------------------------------------------------------------


class Parking(StateGraph):
    new = State(externally_progressed=True)
    parked = State(externally_progressed=True, delete_after=100)
    kept = State()
    new.transitions_to(parked)
    parked.transitions_to(kept)


def test_delete_after_deletes_only_after_the_delay_and_only_in_that_state(
    backend, clock, make_stator, build_models
):
    m = build_models(Parking)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id=1), m.Order(id=2), m.Order(id=3))
    assert move_many(stator, m.Order, "parked", [1, 2]) == 2

    clock.advance(50)
    assert move_many(stator, m.Order, "kept", [2]) == 1
    clock.advance(49)
    stator.run_once()
    assert load(stator, m.Order, 1) is not None

    clock.advance(1)
    stator.run_once()
    assert load(stator, m.Order, 1) is None
    assert load(stator, m.Order, 2).state == "kept"
    assert load(stator, m.Order, 3).state == "new"


def test_times_out_to_moves_rows_stuck_in_a_state(backend, clock, make_stator, build_models):
    class Approval(StateGraph):
        new = State(externally_progressed=True)
        waiting = State(externally_progressed=True)
        approved = State()
        expired = State()
        new.transitions_to(waiting)
        waiting.transitions_to(approved)
        waiting.times_out_to(expired, seconds=100)

    m = build_models(Approval)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id=1), m.Order(id=2))
    move_many(stator, m.Order, "waiting")
    move(stator, m.Order, 2, "approved")

    clock.advance(99)
    stator.run_once()
    assert load(stator, m.Order, 1).state == "waiting"
    clock.advance(1)
    report = stator.run_once()
    assert report.transitions == 1
    assert load(stator, m.Order, 1).state == "expired"
    assert load(stator, m.Order, 2).state == "approved"


@pytest.mark.parametrize("route", ["orm", "sql"])
def test_an_initial_state_that_only_times_out_is_scheduled(
    backend, clock, make_stator, build_models, route
):
    """A new row in an initial state without a handler must still time out."""

    class Invite(StateGraph):
        sent = State(externally_progressed=True)
        accepted = State()
        expired = State()
        sent.transitions_to(accepted)
        sent.times_out_to(expired, seconds=3600)

    m = build_models(Invite)
    stator = make_stator(backend, [m.Order], clock)
    if route == "orm":
        add(stator, m.Order(id=1))
    else:
        run_sql(stator, "INSERT INTO orders (id) VALUES (1)")

    stator.run_once()
    assert load(stator, m.Order, 1).state == "sent"
    clock.advance(3600)
    stator.run_once()
    assert load(stator, m.Order, 1).state == "expired"


# -- history -----------------------------------------------------------------------------------


def test_state_history_records_every_transition(backend, clock, make_stator, build_models):
    class Steps(StateGraph):
        new = State()
        review = State(externally_progressed=True)
        done = State()
        new.transitions_to(review)
        review.transitions_to(done)

        @classmethod
        def check_new(cls, order):
            return cls.review

    m = build_models(Steps, history=True)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id=1))

    first = clock.now()
    stator.run_once()
    assert load(stator, m.Order, 1).state_history == [["review", first.isoformat()]]

    second = clock.advance(30)
    order = move(stator, m.Order, 1, "done")
    assert order.state_history == [["review", first.isoformat()], ["done", second.isoformat()]]

    history = load(stator, m.Order, 1).state_history
    assert [state for state, _ in history] == ["review", "done"]
    assert [datetime.fromisoformat(at) for _, at in history] == [first, second]


# -- handlers that write -----------------------------------------------------------------------


def test_handler_changes_commit_with_the_transition(backend, clock, make_stator, build_models):
    class Charging(StateGraph):
        new = State()
        done = State()
        new.transitions_to(done)

        @classmethod
        def check_new(cls, order):
            order.note = "charged"
            write_in_handler(order, m.Line(order_id=str(order.id), text="receipt"))
            return cls.done

    m = build_models(Charging)
    stator = make_stator(backend, [m.Order], clock)
    create_table(stator, m.Line)
    add(stator, m.Order(id=1))

    report = stator.run_once()
    assert (report.transitions, report.lost) == (1, 0)
    row = load(stator, m.Order, 1)
    assert (row.state, row.note) == ("done", "charged")
    assert texts(stator, m.Line) == ["receipt"]


def test_handler_changes_are_discarded_when_the_handler_fails(
    backend, clock, make_stator, build_models
):
    class Failing(StateGraph):
        new = State()
        done = State()
        new.transitions_to(done)

        @classmethod
        def check_new(cls, order):
            order.note = "charged"
            write_in_handler(order, m.Line(order_id=str(order.id), text="receipt"))
            raise RuntimeError("card declined")

    m = build_models(Failing)
    stator = make_stator(backend, [m.Order], clock)
    create_table(stator, m.Line)
    add(stator, m.Order(id=1))

    with pytest.raises(RuntimeError, match="card declined"):
        stator.run_once()
    row = load(stator, m.Order, 1)
    assert (row.state, row.state_attempts, row.note) == ("new", 1, None)
    assert texts(stator, m.Line) == []


def test_handler_changes_are_discarded_when_the_row_moved_meanwhile(
    backend, clock, make_stator, build_models
):
    """The fence holds for the slow path too: no half-applied handler after a lost race."""

    class Racing(StateGraph):
        new = State()
        done = State()
        cancelled = State()
        new.transitions_to(done)
        new.transitions_to(cancelled)

        @classmethod
        def check_new(cls, order):
            # The application cancels it meanwhile (before the handler writes: on SQLite
            # those writes hold the database's write lock until the handler's commit).
            move_elsewhere(stator, m.Order, order.id, "cancelled")
            order.note = "charged"
            write_in_handler(order, m.Line(order_id=str(order.id), text="receipt"))
            return cls.done

    m = build_models(Racing)
    stator = make_stator(backend, [m.Order], clock)
    create_table(stator, m.Line)
    add(stator, m.Order(id=1))

    report = stator.run_once()
    assert (report.lost, report.transitions, report.errors) == (1, 0, 0)
    row = load(stator, m.Order, 1)
    assert (row.state, row.note) == ("cancelled", None)
    assert texts(stator, m.Line) == []


def test_a_plain_result_is_lost_when_the_row_moved_meanwhile(
    backend, clock, make_stator, build_models
):
    """The fast path (a handler that only returns a state) is fenced the same way."""

    class Racing(StateGraph):
        new = State()
        done = State()
        cancelled = State()
        new.transitions_to(done)
        new.transitions_to(cancelled)

        @classmethod
        def check_new(cls, order):
            move_elsewhere(stator, m.Order, order.id, "cancelled")
            return cls.done

    m = build_models(Racing)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id=1))

    report = stator.run_once()
    assert (report.lost, report.transitions) == (1, 0)
    assert load(stator, m.Order, 1).state == "cancelled"


# -- claiming and fencing ----------------------------------------------------------------------


def test_a_claimed_row_is_not_claimed_again_until_its_lease_expires(
    backend, clock, make_stator, build_models
):
    m = build_models(OneStep)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id=1))
    tracked = stator.store.tracked[0]
    lease = OneStep.new.lease

    assert len(stator.store.claim(tracked, clock.now(), 10)) == 1
    clock.advance(lease - 1)
    assert stator.store.claim(tracked, clock.now(), 10) == []
    clock.advance(1)
    assert len(stator.store.claim(tracked, clock.now(), 10)) == 1


def test_a_stale_claim_cannot_write(backend, clock, make_stator, build_models):
    """A worker whose lease expired and whose row was re-claimed must not overwrite it."""
    m = build_models(OneStep)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id=1))
    tracked = stator.store.tracked[0]

    [(_, slow)] = stator.store.claim(tracked, clock.now(), 10)
    clock.advance(OneStep.new.lease + 1)
    [(_, fast)] = stator.store.claim(tracked, clock.now(), 10)
    assert fast.lease_until > slow.lease_until

    stale = after_run(OneStep, slow, Moved(OneStep.done), clock.now())
    assert stator.store.write_all([(tracked, [stale])]) == {"orders": {1}}
    assert load(stator, m.Order, 1).state == "new"

    current = after_run(OneStep, fast, Moved(OneStep.done), clock.now())
    assert stator.store.write_all([(tracked, [current])]) == {"orders": set()}
    assert load(stator, m.Order, 1).state == "done"


def test_a_claim_cannot_write_after_the_application_moved_the_row(
    backend, clock, make_stator, build_models
):
    """A deletion decided on a claimed row must not delete it once the application moved it."""
    m = build_models(Parking)
    stator = make_stator(backend, [m.Order], clock)
    add(stator, m.Order(id=1))
    move_many(stator, m.Order, "parked")
    clock.advance(100)
    tracked = stator.store.tracked[0]
    [(_, claim)] = stator.store.claim(tracked, clock.now(), 10)
    deletion = before_run(Parking, claim, clock.now())
    assert deletion is not None and deletion.delete

    move(stator, m.Order, 1, "kept")

    assert stator.store.write_all([(tracked, [deletion])]) == {"orders": {1}}
    assert load(stator, m.Order, 1).state == "kept"


def test_claims_are_shared_fairly_between_states(backend, clock, make_stator, build_models):
    """A backlog in one state must not starve the rows of another."""
    seen = []

    class Busy(StateGraph):
        a = State()
        b = State()
        done = State()
        a.transitions_to(b)
        b.transitions_to(done)

        @classmethod
        def check_a(cls, row):
            seen.append("a")

        @classmethod
        def check_b(cls, row):
            seen.append("b")

    m = build_models(Busy)
    stator = make_stator(backend, [m.Order], clock, batch_size=20)
    add_many(stator, m.Order, [{"id": i} for i in range(1, 501)])
    add_many(stator, m.Order, [{"id": i, "state": "b"} for i in range(501, 506)])

    report = stator.run_once()
    assert report.claimed == 20
    assert seen.count("b") == 5
    assert seen.count("a") == 15
