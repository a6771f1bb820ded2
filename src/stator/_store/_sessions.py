"""The SQLAlchemy driver's handler scopes: a handler's changes are its ORM session's.

Each handler thread keeps one session, reused row after row; its changes (new, dirty or
deleted objects, or a statement that wrote) send the transition down the slow path, committed
with them in the session's transaction.
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.orm import ORMExecuteState, Session, sessionmaker
from sqlalchemy.orm.attributes import instance_state

from .._policy import Write
from ._dialects import BEGIN_OPTION
from ._tracked import TrackedModel
from .interface import ClaimedTask, Driver, HandlerScope


class SessionScopes:
    """SQLAlchemy: the handler's row is bound to a session; its changes are the session's."""

    def __init__(self, store: Driver) -> None:
        engine: Engine = store.engine
        sqlite = store.dialect.single_writer  # the write lock: taken at the first write
        bind = engine.execution_options(**{BEGIN_OPTION: "lazy"}) if sqlite else engine
        self.sessions = sessionmaker(bind=bind, expire_on_commit=False)
        self.sessions.configure(info={"stator_sqlite": sqlite})
        event.listen(self.sessions, "before_flush", _note_flush)
        event.listen(self.sessions, "do_orm_execute", _note_statement)
        event.listen(self.sessions, "after_begin", _note_begin)
        self._local = threading.local()

    def for_async(self, task: ClaimedTask) -> HandlerScope:
        session = self.sessions()
        session.add(task.obj)
        return SessionScope(session)

    def keep_between_tasks(self) -> None:
        """Nothing to keep: the thread's session already outlives its rows."""

    def settle(self) -> None:
        pass

    def for_thread(self, task: ClaimedTask) -> HandlerScope:
        """The calling thread's session, re-used row after row (a fresh Session per row cost
        a third of the engine's per-row CPU).  A thread runs one handler at a time, so the
        session only ever holds the current row's changes; it is emptied after each row."""
        session: Session | None = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = self.sessions()
            session.info["stator_shared"] = True
        _attach(session, task.obj)
        return SessionScope(session)


def _attach(session: Session, obj: Any) -> None:
    """``session.add(obj)`` for a detached row fresh from a claim.  ``add`` also walks the
    mapper's properties for a save-update cascade, which a mapper without relationships never
    has: for those, what ``add`` does without the walk (a third of its cost, per row)."""
    state = instance_state(obj)
    if state.mapper.relationships or session._warn_on_events:
        session.add(obj)
        return
    state._orphaned_outside_of_session = False
    session._save_or_update_impl(state)


class SessionScope:
    def __init__(self, session: Session) -> None:
        self.session = session

    def wrote(self) -> bool:
        return _has_changes(self.session)

    def commit_with(
        self, store: Driver, tracked: TrackedModel, write: Write, worker_id: str
    ) -> bool:
        session = self.session
        session.flush()
        lost = store.write(tracked, [write], conn=session.connection(), worker_id=worker_id)
        if lost:
            session.rollback()
            return True
        session.commit()
        return False

    def rollback(self) -> None:
        self.session.rollback()

    def release(self) -> None:
        _release(self.session)


def _release(session: Session) -> None:
    if not session.info.get("stator_shared"):
        session.close()
        return
    touched_db = session.info.pop("stator_db", False)
    session.info.pop("stator_wrote", None)
    if touched_db:
        session.rollback()  # ends a read transaction so the next row sees fresh data
    session.expunge_all()


def _note_begin(session: Session, _transaction: Any, _connection: Any) -> None:
    session.info["stator_db"] = True


def _note_flush(session: Session, _context: Any, _instances: Any) -> None:
    _note_write(session)


def _note_statement(state: ORMExecuteState) -> None:
    if state.is_insert or state.is_update or state.is_delete:
        _note_write(state.session)


def _note_write(session: Session) -> None:
    """Remember that the handler wrote, so its transaction is committed with the transition.

    On SQLite handler sessions read without a transaction (no snapshot to go stale); the
    write lock is taken here, at the first write, and held until the commit.
    """
    if session.info.get("stator_wrote"):
        return
    session.info["stator_wrote"] = True
    if session.info.get("stator_sqlite"):
        conn = session.connection()
        raw = conn.connection.dbapi_connection
        if raw is not None and not raw.in_transaction:
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def _has_changes(session: Session) -> bool:
    """``session.new or session.dirty or session.deleted``, read from the collections those
    properties copy into new sets (per row, the copies cost more than the check)."""
    return bool(
        session._new or session.identity_map._modified or session._deleted
        or session.info.get("stator_wrote")
    )
