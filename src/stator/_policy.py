"""Turning "a claimed row + what its handler did + now" into the row's next columns.

Handlers decide; the engine writes.  Every rule about timing lives here as pure functions:
when a row is next due, how far failures back off, when a row is deleted, timed out or given
up on.  The store only executes the ``Write`` values produced here.
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from . import _backoff
from ._graph import State, StateGraph

JITTER = 0.1  # failures back off by ±10% so rows that failed together do not retry together


# ``Claimed`` and ``Write`` are made once per row on the hot path, so they are not
# ``frozen``: a frozen dataclass sets each field through ``object.__setattr__``, which made a
# ``Write`` cost 2.8x as much to build.  Treat them as immutable all the same (the engine
# makes a changed copy with ``dataclasses.replace``); ``eq`` compares them by value.
@dataclass(slots=True)
class Claimed:
    """The engine's view of one claimed row.  ``lease_until`` is the claim's fencing token."""

    pk: Any
    state: str
    state_changed: datetime
    lease_until: datetime
    attempts: int


@dataclass(frozen=True, slots=True)
class Moved:
    target: State


def moved_to(target: State) -> Moved:
    """``Moved(target)``, made once per state (a handler's every move to ``target`` shares
    it: it is frozen), not once per row.  Keyed by identity, checked on the way out: a
    state's ``__hash__`` and ``__eq__`` are Python calls, costlier than the object."""
    found = _MOVES.get(id(target))
    if found is None or found.target is not target:
        found = _MOVES[id(target)] = Moved(target)
    return found


_MOVES: dict[int, Moved] = {}  # any thread; a race makes an equal Moved twice, no harm


@dataclass(frozen=True, slots=True)
class Stayed:
    """``None`` returned, or ``TryAgainLater`` raised: no penalty."""

    delay: float | None = None


FailureKind = Literal["error", "timeout", "invalid"]


@dataclass(frozen=True, slots=True)
class Failed:
    kind: FailureKind
    message: str
    traceback: str = ""
    # What the handler decided follows its failure (``DecidedFailure``), instead of the
    # state's retry rule; ``attempt`` is then the handler's own count of attempts.
    then: Moved | Stayed | None = None
    attempt: int = 0


Outcome = Moved | Stayed | Failed


class DecidedFailure(Exception):
    """Raised (``from`` the error) by a handler that keeps its own count of attempts, as the
    task backend does: this attempt failed, and ``then`` is what follows (a move, or a stay
    of ``then.delay`` seconds).  The engine records, counts and logs it as any failure, but
    applies ``then`` rather than the state's retry rule, and leaves ``state_attempts`` (the
    engine's own failures, which ``max_attempts`` counts) as they are."""

    def __init__(self, then: Moved | Stayed, attempt: int) -> None:
        super().__init__(then, attempt)
        self.then = then
        self.attempt = attempt


@dataclass(slots=True)  # not frozen: see ``Claimed``
class Write:
    """One fenced change to one row: applied only if the row still holds ``fence``."""

    pk: Any
    fence_state: str
    fence: datetime
    delete: bool = False
    state: str = ""
    state_changed: datetime | None = None
    state_next: datetime | None = None
    attempts: int = 0
    moved: bool = False
    failure: Failed | None = None
    attempt: int = 0  # the attempt number the failure belongs to (for the error log)
    failed_at: datetime | None = None  # when that attempt failed (for the error log)
    # Values for the model's own columns that the handler left (``obj.stator_extra``), set by
    # this write itself (``stator_write_columns``) or by the model's ``stator_write_extra`` in
    # its transaction, and only if its fence held: a handler's result rides the batched write
    # instead of costing a transaction of its own (the django.tasks backend's results).
    extra: Any = None


def first_due(state: State, entered: datetime) -> datetime | None:
    """When a row that has just entered ``state`` first needs the engine, or None for never."""
    if state.delete_after is None and state.timed_edge is None:
        # The common case, once per transition: no list, and no new datetime for a state
        # that starts at once (``entered`` itself: the write formats one time, not two).
        if not state.automatic:
            return None
        return entered if state.start_after == 0 else entered + timedelta(
            seconds=state.start_after)
    due: list[datetime] = []
    if state.automatic:
        due.append(entered + timedelta(seconds=state.start_after))
    return _earliest(state, entered, due)


def _earliest(state: State, entered: datetime, due: list[datetime]) -> datetime | None:
    if state.delete_after is not None:
        due.append(entered + timedelta(seconds=state.delete_after))
    if state.timed_edge is not None:
        due.append(entered + timedelta(seconds=state.timed_edge.seconds))
    return min(due) if due else None


def backoff_delay(state: State, failures: int, key: Any) -> float:
    """Seconds to wait after the ``failures``-th consecutive failure: exponential, capped,
    with a jitter that is deterministic per row so tests can predict it."""
    delay = _backoff.delay(failures, state.retry_after, state.max_retry_after, state.backoff)
    spread = (zlib.crc32(f"{key!r}:{failures}".encode()) % 2001) / 1000.0 - 1.0  # -1.0 .. 1.0
    return max(delay * (1.0 + JITTER * spread), 0.001)


def before_run(graph: type[StateGraph], row: Claimed, now: datetime) -> Write | None:
    """What to do with a claimed row before any handler runs; None means "run the handler"."""
    state = graph.states[row.state]
    if state.delete_after is not None and now >= row.state_changed + timedelta(
        seconds=state.delete_after
    ):
        return Write(row.pk, row.state, row.lease_until, delete=True)
    edge = state.timed_edge
    if edge is not None and now >= row.state_changed + timedelta(seconds=edge.seconds):
        return move(row, edge.target, now)
    if not state.automatic:
        # Claimed for a deletion or timeout that is not due yet (its clock disagreed with
        # ours, or the application set state_next by hand): put it back on its schedule.
        return Write(
            row.pk, row.state, row.lease_until, state=row.state,
            state_changed=row.state_changed, state_next=first_due(state, row.state_changed),
            attempts=row.attempts,
        )
    return None


def move(
    row: Claimed, target: State, now: datetime, failure: Failed | None = None, extra: Any = None
) -> Write:
    # Positional, in ``Write``'s field order: keywords cost a slots dataclass's ``__init__``
    # 2.5x as much (434 against 176 ns), and this runs once per transition.
    return Write(
        row.pk, row.state, row.lease_until, False,  # pk, fence_state, fence, delete
        target.name, now, first_due(target, now),  # state, state_changed, state_next
        0, True, failure,  # attempts, moved, failure
        row.attempts + 1 if failure else 0, now if failure else None, extra,  # attempt, failed_at
    )


def after_run(
    graph: type[StateGraph], row: Claimed, outcome: Outcome, now: datetime, extra: Any = None
) -> Write:
    """The write that records ``outcome`` for ``row`` (and the handler's ``extra`` values)."""
    state = graph.states[row.state]
    if isinstance(outcome, Moved):
        return move(row, outcome.target, now, extra=extra)
    if isinstance(outcome, Stayed):
        delay = state.retry_after if outcome.delay is None else outcome.delay
        # "Not yet" is neither progress nor failure: the failure count is kept, so a handler
        # alternating failures and "not yet" still reaches max_attempts.
        return _stay(state, row, now + timedelta(seconds=delay), row.attempts, extra=extra)
    if outcome.then is not None:
        return _decided(state, row, outcome, outcome.then, now, extra)
    failures = row.attempts + 1
    if state.max_attempts is not None and failures >= state.max_attempts:
        assert state.exhausted_to is not None  # guaranteed by graph validation
        return move(row, state.exhausted_to, now, failure=outcome, extra=extra)
    retry_at = now + timedelta(seconds=backoff_delay(state, failures, row.pk))
    return _stay(state, row, retry_at, failures, outcome, now, extra)


def _decided(
    state: State, row: Claimed, failure: Failed, then: Moved | Stayed, now: datetime, extra: Any,
) -> Write:
    if isinstance(then, Moved):
        write = move(row, then.target, now, failure=failure, extra=extra)
    else:
        delay = state.retry_after if then.delay is None else then.delay
        write = _stay(state, row, now + timedelta(seconds=delay), row.attempts, failure, now,
                      extra)
    return dataclasses.replace(write, attempt=failure.attempt or write.attempt or 1)


def _stay(
    state: State, row: Claimed, retry_at: datetime, attempts: int, failure: Failed | None = None,
    failed_at: datetime | None = None, extra: Any = None,
) -> Write:
    return Write(
        row.pk, row.state, row.lease_until, state=row.state, state_changed=row.state_changed,
        state_next=_earliest(state, row.state_changed, [retry_at]), attempts=attempts,
        failure=failure, attempt=attempts if failure else 0, failed_at=failed_at, extra=extra,
    )


def release(row: Claimed, now: datetime) -> Write:
    """Hand an unstarted claim back so any worker can take it at once."""
    return Write(
        row.pk, row.state, row.lease_until, state=row.state, state_changed=row.state_changed,
        state_next=now, attempts=row.attempts,
    )


def check_target(graph: type[StateGraph], row_state: str, returned: object) -> State | str:
    """Resolve a handler's return value to a State, or explain why it is not allowed."""
    if isinstance(returned, State):
        name = getattr(returned, "name", None)
    elif isinstance(returned, str):
        name = returned
    else:
        return f"handler returned {returned!r}; expected a State, a state name or None"
    current = graph.states[row_state]
    if name not in current.children:
        allowed = ", ".join(current.children) or "nothing"
        return (
            f"handler returned {name!r}, but {graph.__name__}.{row_state} may only move to "
            f"{allowed}"
        )
    if isinstance(returned, State) and returned.graph is not graph:
        return f"handler returned a state of {returned.graph.__name__}, not {graph.__name__}"
    return current.children[name]
