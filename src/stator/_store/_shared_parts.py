"""What both drivers answer the same way: by handing the call to a part they both hold.

The SQLAlchemy and Django drivers differ in how they reach the database (an engine of their
own, or Django's connections lent to one) and how they load rows; every other operation goes
to the parts they compose, ``SqlOperations`` (claims' neighbours: fenced writes, due times),
``Bookkeeping`` (workers, stats, errors) and ``SchemaKeeper``.  Those forwards live here once,
so a new operation on the protocol is added to both drivers by one edit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Connection

from .._policy import Write
from ._bookkeeping import Bookkeeping
from ._migrate import SchemaKeeper
from ._operations import SqlOperations
from ._records import EdgeCount, Heartbeat, StatsPeriod
from ._tracked import TrackedModel
from .interface import INLINE, DueDepth, WriteGroup

if TYPE_CHECKING:
    from ._read_records import ErrorRecord, ModelStats, StateCount, WorkerRecord
    from .interface import Driver


class SharedParts:
    """The forwards both drivers inherit; each driver sets the three parts in ``__init__``."""

    ops: SqlOperations
    books: Bookkeeping
    schema: SchemaKeeper

    # -- fenced writes and due times (``SqlOperations``) --------------------------------------

    def write(
        self, tracked: TrackedModel, writes: Sequence[Write], conn: Connection | None = None,
        worker_id: str = INLINE,
    ) -> set[Any]:
        return self.ops.write(tracked, writes, conn, worker_id)

    def write_all(
        self, groups: Sequence[WriteGroup], worker_id: str = INLINE
    ) -> dict[str, set[Any]]:
        return self.ops.write_all(groups, worker_id)

    def next_due(
        self, tracked: Iterable[TrackedModel], claimable_at: datetime | None = None
    ) -> datetime | None:
        return self.ops.next_due(tracked, claimable_at)

    def due_depth(self, tracked: Iterable[TrackedModel], now: datetime) -> dict[str, DueDepth]:
        return self.ops.due_depth(tracked, now)

    # -- workers, stats, status (``Bookkeeping``) ---------------------------------------------

    def heartbeat(self, beat: Heartbeat) -> None:
        self.books.heartbeat(beat)

    def forget_worker(self, worker_id: str) -> None:
        self.books.forget_worker(worker_id)

    def record_stats(
        self, periods: Sequence[StatsPeriod], prune_before: datetime,
        edges: Sequence[EdgeCount] = (),
    ) -> None:
        self.books.record_stats(periods, prune_before, edges)

    def state_counts(self, now: datetime) -> list[StateCount]:
        from ._counts import state_counts  # a report's, not a worker's: imported when asked

        return state_counts(cast("Driver", self), now)

    def recent_stats(self, since: datetime) -> list[ModelStats]:
        return self.books.recent_stats(since)

    def recent_errors(
        self, limit: int = 20, models: Sequence[str] | None = None
    ) -> list[ErrorRecord]:
        return self.books.recent_errors(limit, models)

    def workers(self, models: Sequence[str] | None = None) -> list[WorkerRecord]:
        return self.books.workers(models)

    # -- schema (``SchemaKeeper``) -------------------------------------------------------------

    def uninstall(self, then: Callable[[Connection], None] | None = None) -> list[str]:
        return self.schema.uninstall(then)

    def problems(self) -> list[str]:
        return self.schema.problems()

    def check_ready(self) -> None:
        self.schema.check_ready()
