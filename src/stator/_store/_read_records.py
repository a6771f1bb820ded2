"""What a driver's bookkeeping reads give back (see ``interface.Driver``): the rows of Stator's
workers and errors tables, the summed stats of a model, and the rows per state.  Apart from
``_records`` (what a worker writes): a worker never reads them, and each frozen dataclass
costs its import a millisecond or two to build.

Frozen and typed, so every reader (``stator status``, the dashboard, ``/metrics``, the
conformance suite) names the same fields and a driver cannot hand back a key the others lack.
``as_row`` gives the stored shape where a reader prints it (``stator status``'s JSON).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class WorkerRecord:
    """A worker's row in ``stator_workers``, as its last heartbeat left it."""

    id: str
    hostname: str
    pid: int
    started_at: datetime
    last_seen: datetime
    concurrency: int
    models: tuple[str, ...]
    threads: Mapping[str, str]

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> WorkerRecord:
        """From the stored row: models comma-separated, threads as JSON (unreadable: none)."""
        try:
            threads = json.loads(row["threads"])
        except ValueError:
            threads = {}
        return cls(
            id=row["id"], hostname=row["hostname"], pid=row["pid"],
            started_at=row["started_at"], last_seen=row["last_seen"],
            concurrency=row["concurrency"], models=tuple(row["models"].split(",")),
            threads=threads if isinstance(threads, dict) else {},
        )

    def as_row(self) -> dict[str, Any]:
        """The stored shape (models comma-separated, threads as JSON)."""
        return {**dataclasses.asdict(self), "models": ",".join(self.models),
                "threads": json.dumps(dict(self.threads))}


@dataclass(frozen=True)
class ErrorRecord:
    """A failure in ``stator_errors``: which row, in which state and attempt, what it was."""

    id: int
    model: str
    row_pk: str
    state: str
    attempt: int
    kind: str
    message: str
    traceback: str
    created_at: datetime
    worker_id: str

    def as_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ModelStats:
    """One model's stats periods since a time, summed (the longest lag, not a sum)."""

    model: str
    processed: int = 0
    transitions: int = 0
    errors: int = 0
    timeouts: int = 0
    lost: int = 0
    max_lag: float = 0.0

    def as_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class StateCount:
    """One model's rows in one state: how many, how many due now and since when, how many
    failing; ``known`` when the graph has the state, ``estimated`` when the figures come from
    the planner's statistics rather than a count (see ``_counts``)."""

    model: str
    state: str
    rows: int
    due: int
    oldest_due: datetime | None
    failing: int
    known: bool
    estimated: bool = False
