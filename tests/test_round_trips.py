"""Round trips to PostgreSQL on the hot path.

On a link with latency, every round trip of a claim or a write-back is paid per batch, so the
engine keeps them to one: a claim is one autocommit statement, and so is the write-back of a
batch that is one model's plain moves, the wake-up NOTIFY folded into it.  Round trips are
counted from libpq's own trace of each connection the store checks out (every message the
client sends; a round trip ends with a ``Query`` or a ``Sync``), so nothing that psycopg or
SQLAlchemy sends on their own (BEGIN, COMMIT) can hide from the count.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import IO, Any

import pytest
from psycopg.pq import Trace
from sqlalchemy import Engine, event, select, text
from sqlalchemy.orm import Session

from stator import ManualClock, State, StateGraph, Stator, _policy
from stator._policy import Failed, Write
from stator._store import _wake_sender


class Quick(StateGraph):
    new = State(timeout=10)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        return cls.done


# Round trips are PostgreSQL's: SQLite runs in the process.
pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


class Trip:
    """What the client sent to the server while traced: one message per entry."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    @property
    def round_trips(self) -> int:
        """Each ``Query`` (simple protocol) or ``Sync`` (extended) waits for the server."""
        return sum(1 for m in self.sent if m.split("\t")[0] in ("Query", "Sync"))

    @property
    def queries(self) -> list[str]:
        return [m.split("\t", 1)[1].strip() for m in self.sent if m.startswith("Query\t")]


@contextmanager
def traced(engine: Engine) -> Iterator[Trip]:
    """libpq's trace of every connection checked out of ``engine``'s pool meanwhile."""
    trip = Trip()
    traces: list[tuple[Any, IO[str]]] = []
    with ExitStack() as files:

        def on_checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
            out = files.enter_context(tempfile.TemporaryFile("w+"))
            traces.append((dbapi_conn, out))
            dbapi_conn.pgconn.trace(out.fileno())
            dbapi_conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)

        def on_checkin(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.pgconn.untrace()  # flushes it (the pool's reset on return included)

        event.listen(engine, "checkout", on_checkout)
        event.listen(engine, "checkin", on_checkin)
        try:
            yield trip
        finally:
            event.remove(engine, "checkout", on_checkout)
            event.remove(engine, "checkin", on_checkin)
            for dbapi_conn, out in traces:
                dbapi_conn.pgconn.untrace()  # no-op when already untraced at checkin
                out.seek(0)
                # Lines are "F|B <TAB> length <TAB> message type <TAB> contents".
                trip.sent.extend(
                    line.split("\t", 2)[2] for line in out.read().splitlines()
                    if line.startswith("F\t")
                )


def insert(stator: Stator, model: Any, *pks: int) -> None:
    with Session(stator.engine) as session:
        session.add_all([model(id=pk) for pk in pks])
        session.commit()


def states(stator: Stator, model: Any) -> dict[int, str]:
    with Session(stator.engine) as session:
        return {r.id: r.state for r in session.scalars(select(model))}


def claimed(stator: Stator, clock: ManualClock, limit: int) -> list[Any]:
    (tracked,) = stator.store.tracked
    return [c for _obj, c in stator.store.claim(tracked, clock.now(), limit)]


def test_a_claim_is_one_round_trip(backend, clock, build_models, make_stator):
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], clock)
    insert(stator, models.Order, 1, 2, 3)
    assert len(claimed(stator, clock, 1)) == 1  # first: connects, reads the paused models
    with traced(stator.engine) as trip:
        assert len(claimed(stator, clock, 2)) == 2
    assert trip.round_trips == 1, trip.sent
    assert trip.queries == []  # no BEGIN, no COMMIT


def test_a_write_back_of_moves_is_one_round_trip_and_still_wakes_listeners(
    backend, clock, build_models, make_stator
):
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], clock)
    insert(stator, models.Order, 1, 2)
    (tracked,) = stator.store.tracked
    writes = [_policy.move(c, Quick.done, clock.now()) for c in claimed(stator, clock, 2)]
    listener = stator.store.listen_connection()
    try:
        listener.execute("LISTEN stator")
        with traced(stator.engine) as trip:
            assert stator.store.write_all([(tracked, writes)], "w1") == {"orders": set()}
        assert trip.round_trips == 1, trip.sent
        assert trip.queries == []
        assert "pg_notify" in " ".join(trip.sent)  # folded into the one statement
        heard = [n.payload for n in listener.notifies(timeout=20, stop_after=1)]
        assert heard == ["orders"]
    finally:
        listener.close()
    assert states(stator, models.Order) == {1: "done", 2: "done"}


def test_a_write_back_without_a_notify_due_is_one_round_trip(
    backend, clock, build_models, make_stator, monkeypatch
):
    monkeypatch.setattr(_wake_sender, "NOTIFY_EVERY", 3600.0)
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], clock)
    insert(stator, models.Order, 1, 2)
    (tracked,) = stator.store.tracked
    first, second = (
        _policy.move(c, Quick.done, clock.now()) for c in claimed(stator, clock, 2)
    )
    stator.store.write_all([(tracked, [first])], "w1")  # sends the notification
    with traced(stator.engine) as trip:
        assert stator.store.write_all([(tracked, [second])], "w1") == {"orders": set()}
    assert trip.round_trips == 1, trip.sent
    assert "pg_notify" not in " ".join(trip.sent)  # not due again for an hour
    assert states(stator, models.Order) == {1: "done", 2: "done"}


def test_a_refused_write_back_is_reported_in_its_one_round_trip(
    backend, clock, build_models, make_stator
):
    """The fence holds in the one statement: a row whose lease changed is not written, and
    the writer learns which."""
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], clock)
    insert(stator, models.Order, 1, 2)
    (tracked,) = stator.store.tracked
    one, two = claimed(stator, clock, 2)
    stale = replace(  # fenced by a lease the row does not hold
        _policy.move(one, Quick.done, clock.now()), fence=one.lease_until - timedelta(seconds=1)
    )
    fresh = _policy.move(two, Quick.done, clock.now())
    with traced(stator.engine) as trip:
        lost = stator.store.write_all([(tracked, [stale, fresh])], "w1")
    assert lost == {"orders": {one.pk}}
    assert trip.round_trips == 1, trip.sent
    assert states(stator, models.Order) == {one.pk: "new", two.pk: "done"}


def test_a_write_back_with_a_failure_keeps_its_transaction(
    backend, clock, build_models, make_stator
):
    """A failure's error row is written only if the row's fence held: that takes the
    transaction (the one-statement form would drop the error row)."""
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], clock)
    insert(stator, models.Order, 1, 2)
    (tracked,) = stator.store.tracked
    one, two = claimed(stator, clock, 2)
    failed = _policy.move(
        one, Quick.new, clock.now(), Failed("error", "RuntimeError: boom", "Traceback…")
    )
    moved = _policy.move(two, Quick.done, clock.now())
    with traced(stator.engine) as trip:
        assert stator.store.write_all([(tracked, [failed, moved])], "w1") == {"orders": set()}
    assert trip.queries[0].startswith('"BEGIN') and trip.queries[-1] == '"COMMIT"'
    (error,) = stator.status()["errors"]
    assert (error["row_pk"], error["message"], error["worker_id"]) == (
        str(one.pk), "RuntimeError: boom", "w1")
    assert states(stator, models.Order) == {one.pk: "new", two.pk: "done"}


class Leaving(StateGraph):
    new = State(timeout=10)
    gone = State(delete_after=60)
    new.transitions_to(gone)

    @classmethod
    def check_new(cls, row: Any) -> State:
        return cls.gone


def test_moves_and_deletes_in_one_write_back_keep_their_transaction(
    backend, clock, build_models, make_stator
):
    """Moves and deletes are two statements: both land, in one transaction."""
    models = build_models(Leaving)
    stator = make_stator(backend, [models.Order], clock)
    insert(stator, models.Order, 1, 2)
    (tracked,) = stator.store.tracked
    one, two = claimed(stator, clock, 2)
    moved = _policy.move(one, Leaving.gone, clock.now())
    deleted = Write(two.pk, two.state, two.lease_until, delete=True)
    with traced(stator.engine) as trip:
        assert stator.store.write_all([(tracked, [moved, deleted])], "w1") == {"orders": set()}
    assert trip.queries[0].startswith('"BEGIN') and trip.queries[-1] == '"COMMIT"'
    assert states(stator, models.Order) == {one.pk: "gone"}


def test_a_write_back_of_deletes_is_one_round_trip(backend, clock, build_models, make_stator):
    models = build_models(Leaving)
    stator = make_stator(backend, [models.Order], clock)
    insert(stator, models.Order, 1, 2)
    (tracked,) = stator.store.tracked
    one, two = claimed(stator, clock, 2)
    deletes = [
        Write(one.pk, one.state, one.lease_until, delete=True),
        Write(two.pk, two.state, two.lease_until - timedelta(seconds=1), delete=True),  # stale
    ]
    with traced(stator.engine) as trip:
        assert stator.store.write_all([(tracked, deletes)], "w1") == {"orders": {two.pk}}
    assert trip.round_trips == 1, trip.sent
    assert states(stator, models.Order) == {two.pk: "new"}


def test_a_claims_commit_does_not_wait_for_the_disk(backend, clock, build_models, make_stator):
    """A lost claim is an expired lease (the fence refuses its holder), so its commit skips
    the WAL flush; the setting lasts only as long as the claim's transaction."""
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], clock)
    insert(stator, models.Order, 1, 2)
    (tracked,) = stator.store.tracked
    params = stator.store.ops.claim_params(tracked, clock.now(), 1)
    with stator.engine.connect() as conn:
        with conn.begin():
            assert len(conn.execute(text(tracked.sql.claim or ""), params).all()) == 1
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "off"
        with conn.begin():
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"
            # A claim that joins a caller's transaction leaves the caller's commit durable.
            assert len(conn.execute(text(tracked.sql.claim_joined or ""), params).all()) == 1
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"
