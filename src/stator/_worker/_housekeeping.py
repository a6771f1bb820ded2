"""Housekeeping: the heartbeat (the workers table, the liveness file), the stats periods
(the stats table, old history deleted), and the worker's last words when its run ends.

The coordinator calls ``tick`` on each turn of its loop and ``final`` once at the end; the
database steps of ``tick`` run through the coordinator's ``guarded`` (off its thread, retried
with backoff), the ones of ``final`` directly.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from .. import _metrics
from .._board import Board
from .._clock import Clock
from .._db_errors import database_errors
from .._store import Bookkeeping, Heartbeat, StatsPeriod, TrackedModel
from .._store.interface import Driver
from ._state import ModelCounters, Tally, WorkerOptions

HEARTBEAT_EVERY = 5.0
STATS_EVERY = 30.0
KEEP_HISTORY = timedelta(days=1)

Guarded = Callable[[Callable[[], bool | None], str], bool]
# Runs a write of the worker's own records where its commit does not wake the worker (the
# SQLite listener's connection, ``Listener.write_unseen``); False if it cannot.
WriteUnseen = Callable[[Callable[[Bookkeeping], None]], bool]


class Housekeeper:
    def __init__(
        self, store: Driver, clock: Clock, board: Board, tally: Tally,
        tracked: Sequence[TrackedModel], options: WorkerOptions, worker_id: str,
        healthy: Callable[[], list[TrackedModel]], write_unseen: WriteUnseen,
    ) -> None:
        self._store = store
        self._clock = clock
        self._board = board
        self._tally = tally
        self._names = [t.name for t in tracked]
        self._options = options
        self._worker_id = worker_id
        self._healthy = healthy  # the tracked models not marked broken
        self._write_unseen = write_unseen
        self._started = clock.now()
        self._last_heartbeat = 0.0  # coordinator thread
        self._last_stats = time.monotonic()  # coordinator thread

    def tick(self, guarded: Guarded) -> None:
        now = time.monotonic()
        if now - self._last_heartbeat >= HEARTBEAT_EVERY:
            self._last_heartbeat = now
            guarded(self._heartbeat, "the workers table")
        if now - self._last_stats >= STATS_EVERY:
            self._last_stats = now
            # The period is closed here, on the coordinator's thread, and the closed one is
            # written on the database-call thread: counts made meanwhile go to the next.
            end = self._clock.now()
            closed, start = self._tally.close_period()
            written = False
            try:
                written = guarded(lambda: self._write_stats(closed, start, end),
                                  "the stats table")
            finally:
                if written:
                    self._tally.settle(closed, end)
                else:
                    self._tally.reopen(closed, start)

    def final(self) -> None:
        """The last period's stats, and the worker's row gone; a database that fails now
        is not waited for (the row expires by itself)."""
        end = self._clock.now()
        closed, start = self._tally.close_period()
        try:
            self._write_stats(closed, start, end)
        except database_errors():
            self._tally.reopen(closed, start)
        else:
            self._tally.settle(closed, end)
        with contextlib.suppress(*database_errors()):
            self._store.forget_worker(self._worker_id)

    def _heartbeat(self) -> bool:
        beat = Heartbeat(
            self._worker_id, self._started, self._clock.now(), self._options.concurrency,
            tuple(self._names), self._board.snapshot(), os.getpid(),
        )
        # Not seen by this worker's own listener: an idle worker's heartbeat is no reason
        # for it to look for work.
        if not self._write_unseen(lambda books: books.heartbeat(beat)):
            self._store.heartbeat(beat)
        if self._options.liveness_file is not None:
            self._options.liveness_file.touch()
        return True

    def _write_stats(
        self, period: dict[str, ModelCounters], start: datetime, now: datetime
    ) -> bool:
        depth = self._store.due_depth(self._healthy(), now)
        periods = []
        for name, counters in period.items():
            count, lag = depth.get(name, (0, 0.0))
            periods.append(StatsPeriod(
                self._worker_id, name, start, now, queue_depth=count, lag_seconds=lag,
                **vars(counters),
            ))
        edges = _metrics.drain_edges(self._worker_id, now)
        if not self._write_unseen(lambda books: books.record_stats(
                periods, now - KEEP_HISTORY, edges)):
            self._store.record_stats(periods, now - KEEP_HISTORY, edges)
        return True
