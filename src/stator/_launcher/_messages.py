"""Messages to the launcher: rows in the target database's ``stator_launcher_messages``.

A sender inserts its row inside its own transaction (plus a ``NOTIFY`` on PostgreSQL, which
is delivered on commit too), so a rolled-back transaction sends nothing and the launcher
only ever sees a message once its sender has committed.  That is TimescaleDB's "the scheduler
waits on the vxid of the transaction that sent the message": a scheduler started because
of a ``restart`` sees everything the sender's transaction did (a migration, say).

The launcher acknowledges a message by filling in ``handled_at``, ``ack`` (TimescaleDB's
true/false) and ``outcome``; a sender may wait for that, with a timeout, and is told
``False`` -- never an exception -- when no launcher answered in time.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, delete, insert, inspect, select, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from .._clock import Clock, SystemClock
from .._store._dialects import dialect_for
from .._store._schema import messages_table
from ..errors import ConfigError, SchemaError
from ._steps import Message

log = logging.getLogger("stator.launcher")

CHANNEL = "stator_launcher"  # NOTIFY channel of control messages (PostgreSQL)
KEEP_HANDLED = timedelta(days=1)


@dataclass(frozen=True)
class Reply:
    """The launcher's acknowledgement of one message."""

    ok: bool
    outcome: str
    handled_at: datetime


@dataclass(frozen=True)
class Sent:
    """A message inserted in the sender's transaction; it exists once that commits."""

    id: int
    kind: Message
    engine: Engine

    def reply(self, timeout: float) -> Reply | None:
        """The launcher's acknowledgement, or None if none came within ``timeout`` seconds.

        Call it after the sending transaction has committed: before that, no launcher can
        see the message.  Database errors while waiting count as "no reply yet".
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        pause = 0.02
        while True:
            try:
                found = read_reply(self.engine, self.id)
            except DBAPIError:
                found = None
            if found is not None:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.25)

    def wait(self, timeout: float) -> bool:
        """TimescaleDB's acknowledgement: True if the launcher carried the message out within
        ``timeout`` seconds (start/restart: a scheduler is running; stop: it is disabled)."""
        reply = self.reply(timeout)
        return reply is not None and reply.ok


def send_message(
    target: Connection | Session | Engine, kind: Message | str, *, clock: Clock | None = None
) -> Sent:
    """Send ``start``, ``stop`` or ``restart`` to the launcher running this database.

    With a ``Connection`` or ``Session`` the message joins the caller's transaction: it is
    sent when the caller commits, and never if it rolls back.  With an ``Engine`` it is sent
    in a transaction of its own, committed here.  Raises ``SchemaError`` if the database has
    no launcher message table (run ``stator migrate``).
    """
    try:
        message = Message(kind)
    except ValueError:
        raise ConfigError(
            f"unknown launcher message {kind!r} (use start, stop or restart)"
        ) from None
    now = (clock or SystemClock()).now()
    if isinstance(target, Engine):
        with target.begin() as conn:
            return _insert(conn, message, now)
    conn = target.connection() if isinstance(target, Session) else target
    return _insert(conn, message, now)


def _insert(conn: Connection, message: Message, now: datetime) -> Sent:
    if not inspect(conn).has_table(messages_table.name):
        raise SchemaError(
            "the database has no launcher message table (stator_launcher_messages): run "
            "`stator migrate APP` (or Stator.migrate())"
        )
    sender = f"{socket.gethostname()}:{os.getpid()}"[:255]
    row_id = conn.execute(
        insert(messages_table).values(kind=message.value, sent_at=now, sender=sender)
    ).inserted_primary_key
    assert row_id is not None
    notify = dialect_for(conn.dialect.name).channel_notify_sql
    if notify is not None:
        conn.execute(text(notify), {"channel": CHANNEL, "payload": message.value})
    return Sent(id=int(row_id[0]), kind=message, engine=conn.engine)


def read_reply(engine: Engine, message_id: int) -> Reply | None:
    t = messages_table
    with engine.connect() as conn:
        row = conn.execute(
            select(t.c.ack, t.c.outcome, t.c.handled_at).where(t.c.id == message_id)
        ).first()
    if row is None or row.handled_at is None:
        return None
    return Reply(ok=bool(row.ack), outcome=row.outcome or "", handled_at=row.handled_at)


def answered_before(engine: Engine) -> bool:
    """Whether a launcher has acknowledged a message of this database's (handled ones are
    kept a day): a sign one watches it, from wherever it runs."""
    t = messages_table
    with engine.connect() as conn:
        if not has_table(conn):
            return False
        return conn.execute(select(t.c.id).where(t.c.handled_at.is_not(None)).limit(1)).first() \
            is not None


# -- the launcher's side ----------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    id: int
    kind: Message


def has_table(conn: Connection) -> bool:
    return inspect(conn).has_table(messages_table.name)


def pending(conn: Connection, now: datetime) -> list[Pending]:
    """Unhandled messages, oldest first (an unknown kind is acknowledged as refused)."""
    t = messages_table
    rows = conn.execute(
        select(t.c.id, t.c.kind).where(t.c.handled_at.is_(None)).order_by(t.c.id)
    ).all()
    found = []
    for row_id, kind in rows:
        try:
            found.append(Pending(int(row_id), Message(kind)))
        except ValueError:
            acknowledge(conn, int(row_id), False, f"unknown message {kind!r}", now)
    return found


def acknowledge(conn: Connection, message_id: int, ok: bool, outcome: str,
                now: datetime) -> None:
    t = messages_table
    conn.execute(
        update(t).where(t.c.id == message_id, t.c.handled_at.is_(None))
        .values(handled_at=now, ack=ok, outcome=outcome[:1000])
    )


def prune(conn: Connection, now: datetime) -> None:
    t = messages_table
    conn.execute(delete(t).where(t.c.handled_at < now - KEEP_HANDLED))


def is_visible(conn: Connection, message_id: int) -> bool:
    t = messages_table
    return conn.execute(select(t.c.id).where(t.c.id == message_id)).first() is not None
