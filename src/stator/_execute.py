"""Running one claimed row's handler and turning what happened into a fenced write.

Shared by ``Stator.run_once`` (inline, errors propagate) and the worker's threads.  A
handler whose session holds changes commits them together with its transition in one
transaction ("slow path"); a handler that only returned a state leaves its write to be
batched with others ("fast path"), and so does every handler of a plain row
(``_plain_rows``), which gets no session at all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import sys
import threading
import traceback
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from . import _policy
from ._clock import Clock, handlers_see
from ._outage import is_transient
from ._plain_rows import NO_WRITES, PlainRow
from ._policy import Claimed, DecidedFailure, Failed, Outcome, Stayed, Write, moved_to
from ._store import TrackedModel
from ._store.interface import Driver, HandlerScope, HandlerScopes
from .errors import TryAgainLater

BUSY_RETRY = 1.0  # seconds before retrying a row whose commit met a busy/lost database


# Between a task's ``finish`` and ``abandon`` (its runner's thread and the coordinator): one
# lock for every task, held for a few lines, rather than one made per claimed row.
_FINISHING = threading.Lock()


@dataclass(eq=False, slots=True)
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

    def finish(self) -> bool:
        """Mark done by the runner; False if the coordinator already gave up on it."""
        with _FINISHING:
            if self.abandoned:
                return False
            self.deadline = None
            return True

    def abandon(self) -> bool:
        """Give up on a running task past its deadline; False if it finished meanwhile."""
        with _FINISHING:
            if self.deadline is None or self.abandoned:
                return False
            self.abandoned = True
            return True


# A state's timeout as a timedelta, made once per value: the lease check compares two
# datetimes (``lease_until - now < span``, ~40 ns) where it took two ``timestamp()`` (~480 ns).
_SPANS: dict[float, timedelta] = {}


def _span(seconds: float) -> timedelta:
    span = _SPANS.get(seconds)
    if span is None:
        try:
            span = timedelta(seconds=seconds)
        except OverflowError:
            span = timedelta.max  # no lease is ever long enough for it
        _SPANS[seconds] = span  # any thread; a race makes an equal timedelta twice, no harm
    return span


class Executor:
    """Knows how to run a task's handler and produce its write."""

    def __init__(self, store: Driver, clock: Clock, worker_id: str = "inline") -> None:
        self.store = store
        self.clock = clock
        self.worker_id = worker_id  # named in the failures its writes record
        self.scopes: HandlerScopes = store.handler_scopes()

    def prepare(self, tracked: TrackedModel, obj: Any, claimed: Claimed) -> Task:
        state = tracked.graph.states[claimed.state]
        return Task(tracked, obj, claimed, state.timeout)

    def before(self, task: Task, now: datetime | None = None) -> bool:
        """Settle rows that need no handler; True if the handler must run.  ``now``: a time
        the caller has just read from the clock."""
        if now is None:
            now = self.clock.now()
        write = _policy.before_run(task.tracked.graph, task.claimed, now)
        if write is None and task.claimed.lease_until - now < _span(task.timeout):
            write = _policy.release(task.claimed, now)  # not enough lease left to start
        if write is not None:
            task.write = write
            return False
        return True

    def run_sync(self, task: Task, clock_seen: bool = False) -> datetime | None:
        """Run the handler and conclude; the time its write was decided at (read after the
        handler) when nothing slower followed (a commit, a failure's hook), else None.
        ``clock_seen``: the caller already lets handlers see the clock (``handlers_see``)."""
        if isinstance(task.obj, PlainRow):
            # No scope of the driver's, and none kept open around this handler (Django's
            # kept atomic block would make its own writes wait for a later row's commit).
            self.scopes.settle()
            session: HandlerScope = NO_WRITES
        else:
            session = self.scopes.for_thread(task)
        try:
            outcome = self._invoke(task, clock_seen)
        except BaseException as exc:  # the thread is dying: record and let it go
            outcome = _failure("error", exc)
            task.error = exc
            self._conclude(task, session, outcome)
            raise
        return self._conclude(task, session, outcome)

    async def run_async(self, task: Task) -> None:
        plain = isinstance(task.obj, PlainRow)
        session: HandlerScope = NO_WRITES if plain else self.scopes.for_async(task)
        handler = task.tracked.graph.states[task.claimed.state].handler
        assert handler is not None
        try:
            with handlers_see(self.clock):
                result = await asyncio.wait_for(_contained(handler(task.obj)), task.timeout)
            outcome = self._interpret(task, result)
        except TimeoutError as exc:  # its chain shows where the handler was when cancelled
            outcome = _failure("timeout", exc, f"handler did not finish within {task.timeout:g}s")
        except TryAgainLater as signal:
            outcome = Stayed(signal.delay)
        except BaseException as raised:
            # Also SystemExit, KeyboardInterrupt or CancelledError from the handler: its
            # failure, recorded (nothing else cancels a handler: its deadline is above).
            error = raised.exc if isinstance(raised, _Contained) else raised
            outcome = _failure("error", error)
            task.error = error
            await self.store.after_async_error()
        await asyncio.to_thread(self._conclude, task, session, outcome)

    def _invoke(self, task: Task, clock_seen: bool = False) -> Outcome:
        handler = task.tracked.graph.states[task.claimed.state].handler
        assert handler is not None
        try:
            if clock_seen:
                returned = handler(task.obj)
            else:
                with handlers_see(self.clock):
                    returned = handler(task.obj)
            return self._interpret(task, returned)
        except TryAgainLater as signal:
            return Stayed(signal.delay)
        except DecidedFailure as decided:
            task.error = decided.__cause__ or decided
            return dataclasses.replace(_failure("error", task.error), then=decided.then,
                                       attempt=decided.attempt)
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
        return moved_to(target)

    def _conclude(self, task: Task, scope: HandlerScope, outcome: Outcome) -> datetime | None:
        """Turn the outcome into a write, committing the handler's changes with it if any;
        the time it was decided at if nothing slower followed (see ``run_sync``)."""
        try:
            if not task.finish():
                return None  # abandoned past its deadline: the late result is discarded
            outcome, extra = _extra(task, outcome)
            now = self.clock.now()
            write = _policy.after_run(task.tracked.graph, task.claimed, outcome, now, extra)
            if isinstance(outcome, Failed):
                # A decided failure's handler left its own record (``stator_extra``).
                task.write = self._noted(task, write) if outcome.then is None else write
                return None
            if not scope.wrote():
                task.write = write
                return now
            try:
                if scope.commit_with(self.store, task.tracked, write, self.worker_id):
                    task.lost = True
                else:
                    task.committed = write
            except Exception as exc:
                scope.rollback()
                task.error = exc
                # A busy or lost database is not the handler's fault; anything else means
                # the handler's own changes could not be saved.
                outcome = Stayed(BUSY_RETRY) if is_transient(exc) else _failure("error", exc)
                task.write = self._noted(task, _policy.after_run(
                    task.tracked.graph, task.claimed, outcome, self.clock.now()
                ))
            return None
        finally:
            scope.release()

    def timed_out(self, task: Task, stack: str = "") -> Write:
        """The write for a sync handler abandoned past its deadline; ``stack`` is where its
        thread was at that moment."""
        outcome = Failed("timeout", f"handler did not finish within {task.timeout:g}s", stack)
        return self._noted(
            task, _policy.after_run(task.tracked.graph, task.claimed, outcome, self.clock.now())
        )

    def _noted(self, task: Task, write: Write) -> Write:
        """A failure's write, with the model's own record of it if it keeps one
        (``stator_failure_extra``): only failures pay for it."""
        tracked = task.tracked
        hook = tracked.failure_extra
        if write.failure is None or hook is None or not tracked.writes_extra:
            return write
        return dataclasses.replace(write, extra=hook(task.obj, write, task.error))


def stack_of(thread: threading.Thread | None) -> str:
    """Where a handler's thread is right now, for the failure record of a hung handler."""
    frame = sys._current_frames().get(thread.ident) if thread and thread.ident else None
    if frame is None:
        return ""
    return ("Stack of the handler's thread at its deadline (most recent call last):\n"
            + "".join(traceback.format_stack(frame)))


class _Contained(Exception):
    """A ``SystemExit`` or ``KeyboardInterrupt`` raised by an async handler, carried out of
    the task that ran it: raised as itself, asyncio lets it out of the event loop, which
    would stop the loop every async handler runs on."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(exc)
        self.exc = exc


async def _contained(handler: Any) -> Any:
    try:
        return await handler
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _Contained(exc) from None


def _extra(task: Task, outcome: Outcome) -> tuple[Outcome, Any]:
    """What the handler left for the write (``obj.stator_extra``), checked against the model.

    A model must say how to write it (``stator_write_columns`` or ``stator_write_extra``); a
    handler leaving values that nothing would write is a mistake to report, not a result to
    drop silently."""
    extra = getattr(task.obj, "stator_extra", None)
    if extra is None or task.tracked.writes_extra:
        return outcome, extra
    name = task.tracked.name
    return Failed(
        "invalid", f"the handler set stator_extra, but model {name} has no stator_write_extra "
        "to write it",
    ), None


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
