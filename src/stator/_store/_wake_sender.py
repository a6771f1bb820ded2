"""The one wake-up sender: how a committed change tells idle workers that rows may be due.

Two channels, both sent only once the change is committed (a worker woken earlier would
claim before the rows are visible and go back to sleep):

- other processes: a NOTIFY on PostgreSQL, sent inside the writing transaction, which the
  database delivers at commit (SQLite has none; its workers poll ``data_version``);
- this process: the in-process hub ``stator._local_wakeups``, called after the commit.

The engine's own write-backs are rate limited (``NotifyLimit``); moves made by application
code and operators are rare and always wake.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, event, text

if TYPE_CHECKING:  # not imported at run time: the Django driver sends wakes without the ORM
    from sqlalchemy.orm import Session

from .. import _local_wakeups
from ._dialects import SqlDialect

NOTIFY_EVERY = 0.1  # seconds
_SESSION_FLAG = "stator_wake"


class NotifyLimit:
    """At most one NOTIFY per model per ``NOTIFY_EVERY``: a busy worker picks its own moved
    rows up anyway, so a notification per batch would cost a round trip per batch for
    nothing."""

    def __init__(self) -> None:
        self._sent: dict[str, float] = {}

    def due(self, name: str) -> bool:
        """Whether a NOTIFY for model ``name`` is due; if so, it is counted as sent."""
        now = time.monotonic()
        if now - self._sent.get(name, -NOTIFY_EVERY) < NOTIFY_EVERY:
            return False
        self._sent[name] = now
        return True


def notify(conn: Connection, dialect: SqlDialect, table: str) -> None:
    """A NOTIFY for ``table`` in ``conn``'s transaction (delivered when it commits)."""
    sql = dialect.notify_sql()
    if sql is not None:
        conn.execute(text(sql), {"table": table})


def notify_cursor(cursor: Any, dialect: SqlDialect, table: str) -> None:
    """``notify`` on a DB-API cursor in the ``format`` paramstyle (a Django cursor)."""
    sql = dialect.notify_sql()
    if sql is not None:
        cursor.execute(sql.replace(":table", "%s"), [table])


def notify_now(engine: Engine, dialect: SqlDialect, payload: str) -> None:
    """A notification in a transaction of its own (the listener's check that they arrive)."""
    if dialect.notify_sql() is not None:
        with engine.connect() as conn:
            notify(conn, dialect, payload)
            conn.commit()


def wake(key: str) -> None:
    """Wake this process's workers on channel ``key`` (call it after the commit)."""
    _local_wakeups.wake(key)


def wake_on_commit(on_commit: Callable[[Callable[[], None]], None], key: str) -> None:
    """Wake this process's workers when the caller's transaction commits; ``on_commit``
    registers a callback with whoever owns the transaction (Django's ``on_commit``)."""
    on_commit(lambda: _local_wakeups.wake(key))


def wake_on_session_commit(session: Session, key: str) -> None:
    """``wake_on_commit`` for a SQLAlchemy session: once per transaction, however many
    moves it made."""
    if session.info.get(_SESSION_FLAG):
        return
    session.info[_SESSION_FLAG] = True

    def _after_commit(_session: Session) -> None:
        _session.info.pop(_SESSION_FLAG, None)
        _local_wakeups.wake(key)

    event.listen(session, "after_commit", _after_commit, once=True)
