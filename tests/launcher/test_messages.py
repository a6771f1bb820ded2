"""Messages to the launcher, on SQLite and PostgreSQL: sent inside the caller's transaction,
visible (and notified) only once it commits, acknowledged by the launcher's side."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
from sqlalchemy import insert, select, text
from sqlalchemy.orm import Session

from stator import ConfigError, ManualClock, SchemaError, State, StateGraph, Stator
from stator._launcher import _messages
from stator._launcher._discovery import Target, normalize
from stator._launcher._tenant import Tenant
from stator._store._schema import SCHEMA_VERSION, messages_table
from stator.launcher import Message, send_message


class Orders(StateGraph):
    new = State()
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, order: Any) -> State:
        return cls.done


@pytest.fixture
def app(make_stator: Callable[..., Stator], backend: str, clock: ManualClock,
        build_models: Callable[..., SimpleNamespace]) -> Stator:
    return make_stator(backend, [build_models(Orders).Order], clock)


def kinds(stator: Stator) -> list[str]:
    with stator.engine.connect() as conn:
        return list(conn.execute(select(messages_table.c.kind).order_by(messages_table.c.id))
                    .scalars())


def test_a_rolled_back_transaction_sends_nothing(app: Stator) -> None:
    with Session(app.engine) as session:
        send_message(session, "restart")
        session.rollback()
    with app.engine.connect() as conn:
        send_message(conn, Message.STOP)
        conn.rollback()
    assert kinds(app) == []


def test_a_committed_one_is_sent_with_the_callers_own_changes(app: Stator) -> None:
    with Session(app.engine) as session:
        session.execute(text("INSERT INTO orders (id) VALUES (1)"))
        sent = send_message(session, "restart")
        session.commit()
    with app.engine.connect() as conn:
        sent_too = send_message(conn, "start")
        conn.commit()
    by_engine = send_message(app.engine, "stop")
    assert kinds(app) == ["restart", "start", "stop"]
    assert [sent.kind, sent_too.kind, by_engine.kind] == [
        Message.RESTART, Message.START, Message.STOP]
    assert sent.id < sent_too.id < by_engine.id


def test_the_sender_hears_the_acknowledgement_or_false(app: Stator, clock: ManualClock
                                                       ) -> None:
    sent = send_message(app.engine, "start")
    assert sent.reply(0.05) is None and sent.wait(0.05) is False  # nobody answered
    tenant = Tenant(Target.of(normalize(app.engine.url)), app.models)
    try:
        pending = tenant.messages(clock.now())
        assert [(p.id, p.kind) for p in pending] == [(sent.id, Message.START)]
        tenant.acknowledge(sent.id, True, "started (scheduler pid 1)", clock.now())
        assert tenant.messages(clock.now()) == []
        reply = sent.reply(5)
        assert reply is not None and reply.ok and reply.outcome.startswith("started")
        assert sent.wait(5) is True
        refused = send_message(app.engine, "restart")
        tenant.acknowledge(refused.id, False, "enabled (waiting for a worker slot)",
                           clock.now())
        assert refused.wait(5) is False
    finally:
        tenant.dispose()


def test_unknown_kinds_are_refused_in_place(app: Stator, clock: ManualClock) -> None:
    with pytest.raises(ConfigError, match="unknown launcher message"):
        send_message(app.engine, "reboot")
    with app.engine.begin() as conn:
        conn.execute(insert(messages_table).values(
            kind="reboot", sent_at=datetime.now(UTC), sender="test"))
    tenant = Tenant(Target.of(normalize(app.engine.url)), app.models)
    try:
        assert tenant.messages(clock.now()) == []
    finally:
        tenant.dispose()
    with app.engine.connect() as conn:
        row = conn.execute(select(messages_table.c.ack, messages_table.c.outcome)).one()
    assert row.ack is False and "unknown message" in row.outcome


def test_no_message_table_is_a_schema_error_that_spares_the_transaction(
    backend: str, clock: ManualClock, build_models: Callable[..., SimpleNamespace]
) -> None:
    stator = Stator(backend, [build_models(Orders).Order], clock=clock)
    try:
        with stator.engine.connect() as conn:
            with pytest.raises(SchemaError, match="stator migrate"):
                send_message(conn, "start")
            assert conn.execute(text("SELECT 1")).scalar() == 1  # still usable
        tenant = Tenant(Target.of(normalize(stator.engine.url)), stator.models)
        assert tenant.messages(clock.now()) == []  # the launcher's side just sees none
        tenant.dispose()
    finally:
        stator.dispose()


def test_uninstall_keeps_the_message_table_and_sends_restart(app: Stator) -> None:
    done = app.uninstall()
    assert "dropped table stator_schema" in done
    assert kinds(app) == ["restart"]
    assert any("no Stator tables" in p for p in app.store.problems())
    assert app.uninstall() == []  # nothing left to drop, nothing sent
    assert kinds(app) == ["restart"]
    app.migrate()
    app.check()


def test_postgresql_notifies_on_commit_only(app: Stator, pg_admin: Any) -> None:
    if app.engine.dialect.name != "postgresql":
        pytest.skip("NOTIFY is PostgreSQL's")
    url = app.engine.url
    listener = psycopg.connect(host=url.host, port=url.port or 5432, user=url.username,
                               dbname=url.database, autocommit=True)
    try:
        listener.execute(f"LISTEN {_messages.CHANNEL}")
        with app.engine.connect() as conn:
            send_message(conn, "restart")
            conn.rollback()
        with app.engine.connect() as conn:
            send_message(conn, "stop")
            conn.commit()
        # Notifications arrive in commit order: a marker sent last bounds the wait.
        pg_admin.execute(f"NOTIFY {_messages.CHANNEL}, 'marker'")
        heard = []
        for note in listener.notifies(timeout=30):
            heard.append(note.payload)
            if note.payload == "marker":
                break
        assert heard == ["stop", "marker"]
    finally:
        listener.close()


def test_a_version_1_database_gets_the_message_table_by_migrating(app: Stator) -> None:
    with app.engine.begin() as conn:
        messages_table.drop(conn)
        conn.execute(text("UPDATE stator_schema SET version = 1"))
    assert any("version 1" in p and "stator migrate" in p for p in app.store.problems())
    with pytest.raises(SchemaError, match="stator migrate"):
        send_message(app.engine, "restart")
    assert app.migrate() == [f"stator schema upgraded to version {SCHEMA_VERSION}"]
    app.check()
    assert send_message(app.engine, "restart").id == 1
