"""The launcher's per-database state machine: it takes the steps of ``_steps``'s table.

Nothing here does I/O or reads a clock: ``Machine`` changes entries and the slot pool (pure
bookkeeping) and returns ``Effect``s -- start a scheduler, terminate one, ask one to yield --
that the supervisor carries out on real processes.  Times are plain seconds on one
monotonic scale, passed in by the caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .. import _backoff
from ._steps import (
    AUTOMATIC_STEPS,
    MESSAGE_STEPS,
    Action,
    DbState,
    Message,
    Step,
    Trigger,
)


@dataclass(frozen=True)
class Backoff:
    """Delay before regenerating a crashed scheduler: at least ``floor`` (so an operator can
    step in), doubling with each consecutive crash, at most ``cap``."""

    floor: float = 5.0
    cap: float = 300.0

    def delay(self, streak: int) -> float:
        return _backoff.delay(streak, self.floor, self.cap)


class SlotPool:
    """Worker slots (``--max-workers``): every scheduler process holds one, and so does the
    launcher itself."""

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError("max_workers must be at least 2: one for the launcher itself, "
                             "one for a scheduler")
        self.capacity = capacity
        self.used = 0

    @property
    def free(self) -> int:
        return self.capacity - self.used

    def reserve(self) -> bool:
        if self.used >= self.capacity:
            return False
        self.used += 1
        return True

    def release(self) -> None:
        if self.used <= 0:
            raise RuntimeError("slot released twice")
        self.used -= 1


@dataclass
class Entry:
    """One database as the launcher sees it."""

    key: str
    state: DbState = DbState.ENABLED
    holds_slot: bool = False
    wait_for: int | None = None  # TimescaleDB's vxid: the message whose sender it follows
    # extension: when the database next needs a scheduler; None = not until a wake-up
    wanted_at: float | None = None
    backoff_until: float = 0.0
    enabled_at: float = 0.0
    running_since: float | None = None
    yield_asked: bool = False
    crash_streak: int = 0
    # reported
    starts: int = 0
    restarts: int = 0  # regenerations after a crash
    total_wait: float = 0.0
    max_wait: float = 0.0
    last_exit: str | None = None
    last_error: str | None = None
    start_failures: int = 0
    history: list[Step] = field(default_factory=list, repr=False)

    def eligible_since(self) -> float | None:
        """Since when it has wanted a slot (None: it does not want one now)."""
        if self.state is not DbState.ENABLED or self.wanted_at is None:
            return None
        return max(self.wanted_at, self.backoff_until, self.enabled_at)

    def wants_slot(self, now: float) -> bool:
        since = self.eligible_since()
        return since is not None and since <= now


@dataclass(frozen=True)
class Effect:
    """A process action for the supervisor."""

    action: Action
    key: str
    wait_for: int | None = None


@dataclass
class Outcome:
    steps: list[tuple[str, Step]] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    exhausted: int = 0  # > 0: a slot-exhaustion episode began; this many databases wait

    def extend(self, other: Outcome) -> None:
        self.steps.extend(other.steps)
        self.effects.extend(other.effects)
        self.exhausted = max(self.exhausted, other.exhausted)


class Machine:
    """Every database's entry and the slot pool; the launcher holds one slot from the start."""

    def __init__(self, max_workers: int, *, backoff: Backoff | None = None,
                 slice_seconds: float = 60.0) -> None:
        self.pool = SlotPool(max_workers)
        self.pool.reserve()  # the launcher's own
        self.backoff = backoff or Backoff()
        self.slice = slice_seconds
        self.entries: dict[str, Entry] = {}
        self.exhausted = False
        self.episodes = 0

    # -- inputs ----------------------------------------------------------------------------

    def message(self, key: str, message: Message, now: float,
                message_id: int | None = None) -> Outcome:
        entry = self.entries.get(key)
        step = MESSAGE_STEPS[(entry.state if entry else None, message)]
        return self._take(key, step, now, message_id=message_id)

    def discovered(self, key: str, now: float, wanted_at: float | None) -> Outcome:
        """The implicit start of a database seen for the first time; a no-op for one that is
        registered already (a pending message may have registered it first)."""
        if key in self.entries:
            return Outcome()
        return self._take(key, AUTOMATIC_STEPS[(None, Trigger.DISCOVERED)], now,
                          wanted_at=wanted_at)

    def exited(self, key: str, how: Trigger, now: float, *, wanted_at: float | None = None,
               error: str | None = None) -> Outcome:
        """A STARTED database's scheduler ended: QUIT (no schema), IDLE (nothing due; also
        after a yield) or CRASHED.  ``wanted_at``: its next due time, for IDLE."""
        entry = self.entries.get(key)
        if entry is None or entry.state is not DbState.STARTED:
            return Outcome()  # already moved on (stopped, restarted or dropped)
        entry.last_exit = how.value
        if error is not None:
            entry.last_error = error
        elif how is Trigger.IDLE:
            entry.last_error = None  # it ran and ended cleanly: the old error is history
        return self._take(key, AUTOMATIC_STEPS[(DbState.STARTED, how)], now,
                          wanted_at=wanted_at)

    def start_failed(self, key: str, error: str) -> bool:
        """The scheduler process could not be started: back to ALLOCATED (the slot is kept),
        retried by the automatic transitions.  True the first time in a row (log it once)."""
        entry = self.entries[key]
        entry.state = DbState.ALLOCATED
        entry.running_since = None
        entry.starts -= 1
        entry.last_error = error
        entry.start_failures += 1
        return entry.start_failures == 1

    def wake(self, key: str, wanted_at: float | None) -> None:
        """Work may be due (new rows, a refreshed next due time): want a scheduler by then."""
        entry = self.entries.get(key)
        if entry is None or entry.state is not DbState.ENABLED or wanted_at is None:
            return
        if entry.wanted_at is None or wanted_at < entry.wanted_at:
            entry.wanted_at = wanted_at

    def drop(self, key: str, now: float) -> Outcome:
        """The database is gone: the stop cell, then forget it."""
        if key not in self.entries:
            return Outcome()
        outcome = self.message(key, Message.STOP, now)
        del self.entries[key]
        return outcome

    def automatic(self, now: float) -> Outcome:
        """Every automatic transition available now: ALLOCATED ones start; ENABLED ones that
        want a slot get one, longest-waiting first; if others still wait, schedulers past
        their slice are asked to yield."""
        outcome = Outcome()
        for entry in list(self.entries.values()):
            if entry.state is DbState.ALLOCATED:
                outcome.extend(self._automatic_one(entry, now))
        for entry in self._waiting(now):
            if self.pool.free <= 0:
                break
            outcome.extend(self._automatic_one(entry, now))
        waiting = self._waiting(now)
        if waiting and not self.exhausted:
            self.exhausted = True
            self.episodes += 1
            outcome.exhausted = len(waiting)
        elif not waiting:
            self.exhausted = False
        if waiting:
            outcome.extend(self._preempt(len(waiting), now))
        return outcome

    # -- answers ---------------------------------------------------------------------------

    def ack(self, key: str, message: Message) -> bool:
        """TimescaleDB's acknowledgement: start and restart succeed if a scheduler is STARTED,
        stop if the database is DISABLED."""
        entry = self.entries.get(key)
        if entry is None:
            return message is Message.STOP
        if message is Message.STOP:
            return entry.state is DbState.DISABLED
        return entry.state is DbState.STARTED

    def waiting(self, now: float) -> list[Entry]:
        return self._waiting(now)

    def next_deadline(self, now: float) -> float | None:
        """When the automatic transitions may next have something to do without any other
        event: an entry becoming eligible while a slot is free, or a slice running out while
        others wait.  Entries already waiting for a slot are woken by a slot coming free."""
        times: list[float] = []
        waiting = self._waiting(now)
        if self.pool.free > 0:
            for entry in self.entries.values():
                since = entry.eligible_since()
                if since is not None and since > now:
                    times.append(since)
        if waiting:
            asked = sum(e.yield_asked for e in self.entries.values())
            if asked < len(waiting):
                times.extend(
                    e.running_since + self.slice for e in self.entries.values()
                    if e.state is DbState.STARTED and not e.yield_asked
                    and e.running_since is not None
                )
        return min(times) if times else None

    # -- the one place where steps are applied ---------------------------------------------

    def _take(self, key: str, step: Step, now: float, *, message_id: int | None = None,
              wanted_at: float | None = None) -> Outcome:
        outcome = Outcome(steps=[(key, step)])
        if step.before is None:
            if key in self.entries:
                raise RuntimeError(f"{key}: registered twice")
            entry = self.entries[key] = Entry(key=key, enabled_at=now)
        else:
            entry = self.entries[key]
            if entry.state is not step.before:
                raise RuntimeError(f"{key}: {step} taken from {entry.state}")
        since = entry.eligible_since()  # before the state changes: for waiting times
        if entry.state is not step.after:
            entry.start_failures = 0
            if step.after is DbState.ENABLED:
                entry.enabled_at = now
        entry.state = step.after
        entry.history.append(step)
        if len(entry.history) > 50:
            del entry.history[:-50]
        for action in step.all_actions:
            outcome.extend(self._act(entry, action, now, message_id, wanted_at, since))
        return outcome

    def _act(self, entry: Entry, action: Action, now: float, message_id: int | None,
             wanted_at: float | None, since: float | None) -> Outcome:
        outcome = Outcome()
        match action:
            case Action.REGISTER:
                entry.wanted_at = wanted_at
            case Action.RESERVE_SLOT:
                if not self.pool.reserve():
                    raise RuntimeError("a slot was reserved without a free one")
                entry.holds_slot = True
                waited = max(now - since, 0.0) if since is not None else 0.0
                entry.total_wait += waited
                entry.max_wait = max(entry.max_wait, waited)
            case Action.RELEASE_SLOT:
                if entry.holds_slot:
                    self.pool.release()
                    entry.holds_slot = False
                entry.running_since = None
                entry.yield_asked = False
            case Action.START_SCHEDULER:
                entry.starts += 1
                entry.running_since = now
                entry.yield_asked = False
                outcome.effects.append(Effect(action, entry.key, entry.wait_for))
                entry.wait_for = None  # TimescaleDB clears the vxid once the scheduler started
            case Action.TERMINATE_SCHEDULER:
                entry.running_since = None
                entry.yield_asked = False
                outcome.effects.append(Effect(action, entry.key))
            case Action.SET_WAIT_SENDER:
                entry.wait_for = message_id
            case Action.TRY_AUTOMATIC:
                outcome.extend(self._automatic_one(entry, now))
            case Action.WAKE:
                entry.wanted_at = now
                entry.backoff_until = 0.0  # an operator's message overrides the crash brake
                entry.crash_streak = 0
            case Action.WAIT_FOR_DUE:
                entry.wanted_at = wanted_at
                entry.crash_streak = 0
            case Action.BACK_OFF:
                entry.crash_streak += 1
                entry.restarts += 1
                entry.backoff_until = now + self.backoff.delay(entry.crash_streak)
                entry.wanted_at = now
            case Action.ASK_TO_YIELD:
                entry.yield_asked = True
                outcome.effects.append(Effect(action, entry.key))
        return outcome

    def _automatic_one(self, entry: Entry, now: float) -> Outcome:
        outcome = Outcome()
        if entry.state is DbState.ENABLED:
            if not entry.wants_slot(now) or self.pool.free <= 0:
                return outcome
            step = AUTOMATIC_STEPS[(DbState.ENABLED, Trigger.SLOT_FREE)]
            outcome.extend(self._take(entry.key, step, now))
        if entry.state is DbState.ALLOCATED:
            step = AUTOMATIC_STEPS[(DbState.ALLOCATED, Trigger.SLOT_RESERVED)]
            outcome.extend(self._take(entry.key, step, now))
        return outcome

    def _waiting(self, now: float) -> list[Entry]:
        found = [e for e in self.entries.values() if e.wants_slot(now)]
        # Longest waiting first; between equals, the one that has had fewer turns.
        return sorted(found, key=lambda e: (e.eligible_since() or 0.0, e.starts, e.key))

    def _preempt(self, waiting: int, now: float) -> Outcome:
        outcome = Outcome()
        asked = sum(e.yield_asked for e in self.entries.values())
        candidates = _longest_running(
            e for e in self.entries.values()
            if e.state is DbState.STARTED and not e.yield_asked and e.running_since is not None
            and now - e.running_since >= self.slice
        )
        for entry in candidates[: max(waiting - asked, 0)]:
            outcome.extend(
                self._take(entry.key, AUTOMATIC_STEPS[(DbState.STARTED, Trigger.SLICE_OVER)], now)
            )
        return outcome


def _longest_running(entries: Iterable[Entry]) -> list[Entry]:
    return sorted(entries, key=lambda e: (e.running_since or 0.0, e.key))
