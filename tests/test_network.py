"""A worker whose database went out of reach: the bounds that keep the damage short.

On the server, a session whose client vanished mid-transaction is ended once it has sat
idle longer than any handler's deadline, so the rows it locked are claimable again before
their lease ends.  On the client, connections carry TCP keepalives and a TCP user timeout,
so a call on a dead link fails instead of hanging for minutes; and while a database call
hangs, the coordinator still cuts off handlers at their deadline.  (The same, with a real
cut link between network namespaces: ``tests/netns``.)
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from stator import State, StateGraph, SystemClock
from stator._store._dialects import CLIENT_SETTINGS, idle_transaction_limit, with_client_settings
from test_worker import count, running, wait_until

hung = threading.Event()


class Quick(StateGraph):
    new = State(timeout=1.0)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, order: Any) -> State:
        return cls.done


class Hangs(StateGraph):
    new = State(timeout=0.3, retry_after=600)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, order: Any) -> State:
        hung.wait(30)  # far past the deadline
        return cls.done


def only_postgres(backend: str) -> None:
    if backend.startswith("sqlite"):
        pytest.skip("a PostgreSQL server setting")


def test_the_idle_limit_lies_between_the_longest_deadline_and_a_lease() -> None:
    assert idle_transaction_limit([4.0]) == 6.0
    assert idle_transaction_limit([1.0]) == 5.0  # the floor
    assert 30 < idle_transaction_limit([30.0, 10.0]) < 2 * 30
    assert idle_transaction_limit([]) == 45.0


def test_worker_sessions_carry_the_idle_limit_and_network_bounds(
    backend, build_models, make_stator
):
    only_postgres(backend)
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], SystemClock())
    with stator.engine.connect() as conn:
        assert conn.scalar(text("SHOW idle_in_transaction_session_timeout")) == "5s"
        dsn = conn.connection.dbapi_connection.info.dsn  # type: ignore[union-attr]
    listener = stator.store.listen_connection()
    with listener:
        listen_dsn = listener.info.dsn
    for name, value in CLIENT_SETTINGS.items():
        assert f"{name}={value}" in dsn
        assert f"{name}={value}" in listen_dsn


def test_settings_in_the_url_win(backend, build_models, make_stator):
    only_postgres(backend)
    models = build_models(Quick)
    stator = make_stator(f"{backend}&keepalives_idle=7", [models.Order], SystemClock())
    with stator.engine.connect() as conn:
        dsn = conn.connection.dbapi_connection.info.dsn  # type: ignore[union-attr]
    assert "keepalives_idle=7" in dsn


def test_prepare_threshold_in_the_url_reaches_psycopg(backend, build_models, make_stator):
    """``?prepare_threshold=none`` for PgBouncer < 1.21 in transaction mode (tests/pooler)."""
    assert with_client_settings({"prepare_threshold": "None"})["prepare_threshold"] is None
    assert with_client_settings({"prepare_threshold": "0"})["prepare_threshold"] == 0
    only_postgres(backend)
    models = build_models(Quick)
    stator = make_stator(f"{backend}&prepare_threshold=none", [models.Order], SystemClock())
    with stator.engine.connect() as conn:
        assert conn.connection.dbapi_connection.prepare_threshold is None  # type: ignore[union-attr]


def test_rows_locked_by_a_vanished_session_are_freed(backend, build_models, make_stator):
    """The stranded-lock bug: a client gone mid-transaction left its rows locked (skipped by
    every claim's SKIP LOCKED) until the server's TCP keepalive, two hours by default."""
    only_postgres(backend)
    models = build_models(Quick)
    stator = make_stator(backend, [models.Order], SystemClock())
    with Session(stator.engine) as session:
        session.add(models.Order(id=1))
        session.commit()
    vanished = stator.engine.connect()
    vanished.begin()
    vanished.execute(text("SELECT id FROM orders FOR UPDATE"))  # then never a word more
    url = stator.engine.url
    other = psycopg.connect(
        host=url.host, port=url.port, user=url.username, dbname=url.database,
        options=url.query["options"], autocommit=True,
    )
    with other:
        def free() -> bool:
            return other.execute("SELECT id FROM orders FOR UPDATE SKIP LOCKED").fetchall() != []

        wait_until(free, "the stranded row lock to be released", timeout=30)
    vanished.invalidate()
    vanished.close()


def test_a_hung_database_call_does_not_hold_up_deadlines(backend, build_models, make_stator):
    """While the coordinator's claim hangs (a link gone dead under it), the handler already
    running still gets cut off at its deadline and its timeout is written."""
    hung.clear()
    models = build_models(Hangs)
    stator = make_stator(backend, [models.Order], SystemClock())
    with Session(stator.engine) as session:
        session.add(models.Order(id=1))
        session.commit()
    worker = stator.worker(concurrency=2)
    claim = worker.store.claim
    claims = 0
    unblock = threading.Event()

    def claim_then_hang(*args: Any, **kwargs: Any) -> Any:
        nonlocal claims
        claims += 1
        if claims > 1:
            unblock.wait(60)
        return claim(*args, **kwargs)

    worker.store.claim = claim_then_hang  # type: ignore[method-assign]
    try:
        with running(worker):
            wait_until(
                lambda: count(stator, models.Order, models.Order.state_attempts == 1) == 1,
                "the timeout to be recorded while the claim hangs",
            )
            assert claims >= 2 and not unblock.is_set()
            unblock.set()
            hung.set()
    finally:
        unblock.set()
        hung.set()
    assert {e["kind"] for e in stator.status()["errors"]} == {"timeout"}
