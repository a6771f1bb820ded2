"""What the worker's parts share: its options, the events every thread watches, and the
counts.  Each mutable field says which thread owns it: a field is either written by one
thread only, or written under a lock (a deque is used only where CPython makes its append
and popleft atomic, with one thread taking from it)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path


@dataclass
class WorkerOptions:
    concurrency: int = 4
    batch_size: int = 100
    until_idle: bool = False
    idle_window: float = 1.0
    run_for: float | None = None
    liveness_file: Path | None = None
    listen_url: str | None = None  # a direct connection for LISTEN (behind a pooler)
    max_tasks: int | None = None  # stop after this many handler runs (memory hygiene)
    worker_id: str | None = None  # the worker's name; default: pid and a random part
    max_hung: int | None = None  # hung handler threads kept before exiting (None: concurrency)

    @property
    def hung_cap(self) -> int:
        """How many handler threads hung past their deadline are replaced; one more and the
        worker drains and stops (``TOO_MANY_HUNG``)."""
        return self.concurrency if self.max_hung is None else self.max_hung


# The reason a run ends with when more handler threads hang than ``max_hung``: its process
# should exit and be restarted, the only way to get those threads and their connections back.
TOO_MANY_HUNG = "too many hung handlers"


@dataclass
class ModelCounters:
    processed: int = 0
    transitions: int = 0
    errors: int = 0
    timeouts: int = 0
    deleted: int = 0
    lost: int = 0

    def add(self, other: ModelCounters) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class RunSummary:
    """What one ``run`` did, for the caller and the CLI's closing line."""

    counters: dict[str, ModelCounters] = field(default_factory=dict)
    seconds: float = 0.0
    reason: str = ""
    threads_replaced: int = 0
    hung: int = 0  # handler threads still hung past their deadline when the run ended

    @property
    def needs_restart(self) -> bool:
        """True when the run stopped because too many handlers hung: only a new process
        gets their threads and connections back."""
        return self.reason == TOO_MANY_HUNG

    @property
    def processed(self) -> int:
        return sum(c.processed for c in self.counters.values())

    @property
    def transitions(self) -> int:
        return sum(c.transitions for c in self.counters.values())


class Signals:
    """The two events every part of a worker waits on or sets (an Event is thread-safe)."""

    def __init__(self) -> None:
        # Set by any thread with news for the coordinator (a result, a wake-up, a stop);
        # cleared by the coordinator alone, before it looks around.
        self.kick = threading.Event()
        # Set once, by stop() (any thread) or by run() ending; never cleared.
        self.stop = threading.Event()


class Tally:
    """The per-model counts of the open stats period and of the whole run.

    Owned by the coordinator thread alone: it counts results as it collects them and as the
    writer reports them, and it closes the period before the stats are written (on the
    database-call thread), so that thread writes a period nobody counts into any more.  A
    period that could not be written is merged back into the open one, as if never closed.
    """

    def __init__(self, names: list[str], start: datetime) -> None:
        self.period = {name: ModelCounters() for name in names}  # coordinator thread
        self.period_start = start  # coordinator thread
        self.totals = {name: ModelCounters() for name in names}  # coordinator thread

    def close_period(self) -> tuple[dict[str, ModelCounters], datetime]:
        """The open period's counts and start; a fresh period opens in its place."""
        closed, start = self.period, self.period_start
        self.period = {name: ModelCounters() for name in closed}
        return closed, start

    def settle(self, closed: dict[str, ModelCounters], end: datetime) -> None:
        """A closed period was written: it counts towards the run, the next starts at its end."""
        for name, counters in closed.items():
            self.totals[name].add(counters)
        self.period_start = end

    def reopen(self, closed: dict[str, ModelCounters], start: datetime) -> None:
        """A closed period was not written: its counts go on in the open period."""
        for name, counters in self.period.items():
            closed[name].add(counters)
        self.period, self.period_start = closed, start


class Timing:
    """How long handlers take, for the coordinator's claim size.  Every handler thread and
    the event loop write it (a thread once per slice), so under a lock; the coordinator only
    reads it."""

    def __init__(self, enough: int) -> None:
        self._lock = threading.Lock()
        self._enough = enough
        self.average = 0.01  # seconds, a moving average (under _lock)
        self.measured = 0  # handler runs timed so far (capped; only "enough yet?" matters)

    def note(self, seconds: float, runs: int = 1) -> None:
        """``runs`` handler runs took ``seconds`` in all: the average moves as if each had
        been noted in turn, taking the mean of them."""
        with self._lock:
            if runs == 1:
                self.average = 0.9 * self.average + 0.1 * seconds
            else:
                kept = 0.9 ** runs
                self.average = kept * self.average + (1.0 - kept) * (seconds / runs)
            self.measured = min(self.measured + runs, max(self.measured, self._enough))
