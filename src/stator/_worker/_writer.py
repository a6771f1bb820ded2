"""Batched, fenced write-back: results gather here until a flush rule says write, then a
writer thread of its own writes each batch (``Driver.write_all``, fenced by each row's lease)
while the coordinator goes on claiming.  What was written, and what the fence refused
(lost), comes back to the coordinator, which counts it.

The coordinator calls everything public here; only ``_main`` runs on the writer thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from .. import _incurable, _metrics
from .._board import Board, ThreadState
from .._db_errors import database_errors
from .._outage import Outage, is_transient
from .._policy import Write
from .._store import TrackedModel
from .._store.interface import Driver
from ._state import ModelCounters, Signals, Tally, WorkerOptions

log = logging.getLogger("stator.worker")

FLUSH_DELAY = 0.02  # seconds a finished result may wait to share a write with others
WRITER = "stator-writer"  # its name on the board

WriteBatch = list[tuple[TrackedModel, list[Write]]]


class Writer:
    def __init__(
        self, store: Driver, board: Board, signals: Signals, tally: Tally,
        tracked: Sequence[TrackedModel], options: WorkerOptions, worker_id: str,
        handlers_idle: Callable[[], bool],
    ) -> None:
        self._store = store
        self._board = board
        self._signals = signals
        self._tally = tally
        self._by_name = {t.name: t for t in tracked}
        self._options = options
        self._worker_id = worker_id
        self._handlers_idle = handlers_idle  # nothing queued, nothing running
        self._pending: dict[str, list[Write]] = {}  # coordinator thread
        self._pending_since: float | None = None  # coordinator thread
        self._to_write: queue.SimpleQueue[WriteBatch | None] = queue.SimpleQueue()
        # Appended by the writer thread, taken from by the coordinator (atomic deque ops).
        self._written: deque[tuple[WriteBatch, dict[str, set[Any]]]] = deque()
        self._in_flight = 0  # coordinator thread: batches handed over, not yet reported back
        self._thread: threading.Thread | None = None
        # Set by the writer thread when an ``until_idle`` run must end (a disk that stays
        # full); raised by the coordinator.
        self.gave_up: BaseException | None = None

    @property
    def pending(self) -> bool:
        """Results wait to be handed to the writer thread."""
        return bool(self._pending)

    @property
    def in_flight(self) -> int:
        """Batches handed to the writer thread whose outcome has not been counted yet."""
        return self._in_flight

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name=WRITER, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._to_write.put(None)
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def add(self, model: str, write: Write) -> None:
        pending = self._pending.get(model)
        if pending is None:  # not ``setdefault``, which makes a list on every call
            pending = self._pending[model] = []
            if self._pending_since is None:
                self._pending_since = time.monotonic()
        pending.append(write)

    def flush_due(self) -> bool:
        if self._signals.stop.is_set() or self._pending_since is None:
            return True
        count = sum(len(w) for w in self._pending.values())
        if self._in_flight and count < self._options.batch_size:
            return False  # the writer is busy: let results gather into a bigger batch
        idle = self._handlers_idle()
        return (
            count >= self._options.batch_size
            or idle
            or time.monotonic() - self._pending_since >= FLUSH_DELAY
        )

    def flush(self) -> None:
        """Hand the gathered results to the writer thread, so the coordinator can claim the
        next batch while this one is written (the two overlap on separate connections)."""
        if not self._pending:
            return
        groups = []
        period = self._tally.period
        for name, writes in self._pending.items():
            groups.append((self._by_name[name], _newest(writes, period[name])))
        self._pending = {}
        self._pending_since = None
        self._in_flight += 1
        self._to_write.put(groups)

    def collect_written(self) -> bool:
        """Count the batches written since the last call; True if a written row moved or
        has a next due time (there may be work due now)."""
        moved_any = False
        while self._written:
            groups, lost = self._written.popleft()
            self._in_flight -= 1
            moved_any = self._count_written(groups, lost) or moved_any
        return moved_any

    def _count_written(self, groups: WriteBatch, lost: dict[str, set[Any]]) -> bool:
        moved_any = False
        for tracked, writes in groups:
            counters = self._tally.period[tracked.name]
            refused = lost.get(tracked.name, ())  # looked up once, not per row
            _metrics.written(self._worker_id, tracked.name, tracked.label, writes, refused)
            for w in writes:
                if refused and w.pk in refused:
                    counters.lost += 1
                    continue
                counters.processed += 1
                counters.deleted += w.delete
                counters.transitions += w.moved
                moved_any = moved_any or w.moved or w.state_next is not None
                if w.failure is not None:
                    if w.failure.kind == "timeout":
                        counters.timeouts += 1
                    else:
                        counters.errors += 1
        return moved_any

    # -- the writer thread -----------------------------------------------------------------

    def _disk_stays_full(self, exc: BaseException, outage: Outage) -> bool:
        """``until_idle``: give up on a disk full for longer than ``DISK_FULL_PATIENCE``."""
        return (self._options.until_idle and _incurable.is_disk_full(exc)
                and outage.lasted() >= _incurable.DISK_FULL_PATIENCE)

    def _main(self) -> None:
        try:
            self._write_batches()
        except BaseException as exc:  # SystemExit from a write hook, say: nothing more is
            # written, so the worker must end rather than wait on this thread for ever.
            self.gave_up = WriterDied(f"the writer thread ended: {exc!r}; the rows not "
                                      "written run again after their lease")
            self.gave_up.__cause__ = exc
            log.error("%s", self.gave_up, exc_info=exc, extra={"action": "writer_died"})
            self._signals.kick.set()
        finally:
            self._store.thread_done()

    def _write_batches(self) -> None:
        outage = Outage("writer")
        pause = threading.Event()
        while True:
            self._board.report(WRITER, ThreadState.WAITING, notify=False)
            groups = self._to_write.get()
            if groups is None:
                self._board.report(WRITER, ThreadState.STOPPED, notify=False)
                return
            self._board.report(WRITER, ThreadState.WRITING, notify=False)
            while True:
                try:
                    lost = self._store.write_all(groups, self._worker_id)
                except database_errors() as exc:
                    if is_transient(exc):
                        wait = outage.failed(exc)
                        if self._disk_stays_full(exc, outage):
                            # Not written: the rows run again after their lease.
                            self.gave_up = _incurable.disk_full(exc)
                            lost = {t.name: {w.pk for w in ws} for t, ws in groups}
                            break
                        pause.wait(wait)  # results are kept, not lost
                        continue
                    lost = _not_written(groups)
                except Exception:  # an error no driver's wrapper holds, or a bug: the same
                    lost = _not_written(groups)
                outage.recovered()
                break
            self._written.append((groups, lost))
            self._signals.kick.set()


class WriterDied(RuntimeError):
    """The writer thread ended by an exception it could not handle (see ``Writer._main``)."""


def _not_written(groups: WriteBatch) -> dict[str, set[Any]]:
    """Log the failure being handled; every row of the batch is lost (runs again after its
    lease), and the writer goes on with the next batch."""
    log.exception("writing results failed; the rows run again after their lease",
                  extra={"action": "write_failed"})
    return {t.name: {w.pk for w in ws} for t, ws in groups}


def _newest(writes: list[Write], counters: ModelCounters) -> list[Write]:
    """One model's gathered writes, each row's newest only.  A row claimed again (its lease
    ran out) while an older result of it still waited here: the older result is stale, the
    fence would refuse it.  Left out (and counted lost), or its failure would be recorded
    alongside the newer write that does apply.  Most batches hold each row once: one set
    says so, without the per-row comparison."""
    if len({w.pk for w in writes}) == len(writes):
        return writes
    newest: dict[Any, Write] = {}
    for w in writes:
        kept = newest.get(w.pk)
        if kept is None or w.fence > kept.fence:
            newest[w.pk] = w
    counters.lost += len(writes) - len(newest)
    return list(newest.values())
