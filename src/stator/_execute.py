"""Running one claimed row's handler and turning what happened into a fenced write.

Shared by ``Stator.run_once`` (inline, errors propagate) and the worker's threads.  A
handler whose session holds changes commits them together with its transition in one
transaction ("slow path"); a handler that only returned a state leaves its write to be
batched with others ("fast path").
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import ORMExecuteState, Session, sessionmaker

from . import _policy
from ._clock import Clock
from ._policy import Claimed, Failed, Moved, Outcome, Stayed, Write
from ._store import BEGIN_OPTION, Store, TrackedModel
from .errors import TryAgainLater

BUSY_RETRY = 1.0  # seconds before retrying a row whose commit met a busy/lost database


@dataclass(eq=False)
class Task:
    """One claimed row on its way through a handler."""

    tracked: TrackedModel
    obj: Any
    claimed: Claimed
    timeout: float
    write: Write | None = None  # set when the coordinator still has to write it
    committed: Write | None = None  # the write the slow path already committed
    lost: bool = False  # the fence refused the write
    error: BaseException | None = None
    started: float | None = None  # monotonic
    deadline: float | None = None
    abandoned: bool = False
    thread: str = ""  # the handler thread running it
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def finish(self) -> bool:
        """Mark done by the runner; False if the coordinator already gave up on it."""
        with self._lock:
            if self.abandoned:
                return False
            self.deadline = None
            return True

    def abandon(self) -> bool:
        """Give up on a running task past its deadline; False if it finished meanwhile."""
        with self._lock:
            if self.deadline is None or self.abandoned:
                return False
            self.abandoned = True
            return True


class Executor:
    """Knows how to run a task's handler and produce its write."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        engine: Engine = store.engine
        sqlite = store.dialect.name == "sqlite"
        bind = engine.execution_options(**{BEGIN_OPTION: "lazy"}) if sqlite else engine
        self.sessions = sessionmaker(bind=bind, expire_on_commit=False)
        self.sessions.configure(info={"stator_sqlite": sqlite})
        event.listen(self.sessions, "before_flush", _note_flush)
        event.listen(self.sessions, "do_orm_execute", _note_statement)
        event.listen(self.sessions, "after_begin", _note_begin)
        self._local = threading.local()

    def prepare(self, tracked: TrackedModel, obj: Any, claimed: Claimed) -> Task:
        state = tracked.graph.states[claimed.state]
        return Task(tracked, obj, claimed, state.timeout)

    def before(self, task: Task) -> bool:
        """Settle rows that need no handler; True if the handler must run."""
        now = self.clock.now()
        write = _policy.before_run(task.tracked.graph, task.claimed, now)
        if write is None and now.timestamp() + task.timeout > task.claimed.lease_until.timestamp():
            write = _policy.release(task.claimed, now)  # not enough lease left to start
        if write is not None:
            task.write = write
            return False
        return True

    def run_sync(self, task: Task) -> None:
        session = self._thread_session(task)
        try:
            outcome = self._invoke(task)
        except BaseException as exc:  # the thread is dying: record and let it go
            outcome = _failure("error", exc)
            task.error = exc
            self._conclude(task, session, outcome)
            raise
        self._conclude(task, session, outcome)

    async def run_async(self, task: Task) -> None:
        session = self._session_for(task)
        handler = task.tracked.graph.states[task.claimed.state].handler
        assert handler is not None
        try:
            result = await asyncio.wait_for(handler(task.obj), timeout=task.timeout)
            outcome = self._interpret(task, result)
        except TimeoutError as exc:  # its chain shows where the handler was when cancelled
            outcome = _failure("timeout", exc, f"handler did not finish within {task.timeout:g}s")
        except TryAgainLater as signal:
            outcome = Stayed(signal.delay)
        except Exception as exc:
            outcome = _failure("error", exc)
            task.error = exc
        await asyncio.to_thread(self._conclude, task, session, outcome)

    def _session_for(self, task: Task) -> Session:
        session = self.sessions()
        session.add(task.obj)
        return session

    def _thread_session(self, task: Task) -> Session:
        """The calling thread's session, re-used row after row (a fresh Session per row cost
        a third of the engine's per-row CPU).  A thread runs one handler at a time, so the
        session only ever holds the current row's changes; it is emptied after each row."""
        session: Session | None = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = self.sessions()
            session.info["stator_shared"] = True
        session.add(task.obj)
        return session

    def _invoke(self, task: Task) -> Outcome:
        handler = task.tracked.graph.states[task.claimed.state].handler
        assert handler is not None
        try:
            return self._interpret(task, handler(task.obj))
        except TryAgainLater as signal:
            return Stayed(signal.delay)
        except Exception as exc:
            task.error = exc
            return _failure("error", exc)

    def _interpret(self, task: Task, result: Any) -> Outcome:
        if result is None:
            return Stayed()
        target = _policy.check_target(task.tracked.graph, task.claimed.state, result)
        if isinstance(target, str):
            handler = task.tracked.graph.states[task.claimed.state].handler
            return Failed("invalid", target, _returned_from(handler))
        return Moved(target)

    def _conclude(self, task: Task, session: Session, outcome: Outcome) -> None:
        """Turn the outcome into a write, committing the handler's changes with it if any."""
        try:
            if not task.finish():
                return  # abandoned past its deadline: the late result is discarded
            write = _policy.after_run(task.tracked.graph, task.claimed, outcome, self.clock.now())
            if isinstance(outcome, Failed) or not _has_changes(session):
                task.write = write
                return
            try:
                session.flush()
                lost = self.store.write(task.tracked, [write], conn=session.connection())
                if lost:
                    session.rollback()
                    task.lost = True
                else:
                    session.commit()
                    task.committed = write
            except OperationalError as exc:
                session.rollback()
                task.write = _policy.after_run(
                    task.tracked.graph, task.claimed, Stayed(BUSY_RETRY), self.clock.now()
                )
                task.error = exc
            except Exception as exc:  # the handler's own changes could not be saved
                session.rollback()
                task.error = exc
                task.write = _policy.after_run(
                    task.tracked.graph, task.claimed, _failure("error", exc), self.clock.now()
                )
        finally:
            _release(session)

    def timed_out(self, task: Task, stack: str = "") -> Write:
        """The write for a sync handler abandoned past its deadline; ``stack`` is where its
        thread was at that moment."""
        outcome = Failed("timeout", f"handler did not finish within {task.timeout:g}s", stack)
        return _policy.after_run(task.tracked.graph, task.claimed, outcome, self.clock.now())


def _has_changes(session: Session) -> bool:
    return bool(session.new or session.dirty or session.deleted or session.info.get("stator_wrote"))


def _failure(kind: _policy.FailureKind, exc: BaseException, message: str = "") -> Failed:
    message = message or f"{type(exc).__name__}: {exc}"
    return Failed(kind, message, "".join(traceback.format_exception(exc)))


def _returned_from(handler: Any) -> str:
    """Where a handler that returned something unusable is defined (it raised nothing, so
    there is no traceback to show: this is the next best thing)."""
    func = inspect.unwrap(getattr(handler, "__func__", handler))
    code = getattr(func, "__code__", None)
    if code is None:
        return ""
    return (
        "The handler returned normally, with a value the graph does not accept:\n"
        f'  File "{code.co_filename}", line {code.co_firstlineno}, in {func.__qualname__}\n'
    )


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
