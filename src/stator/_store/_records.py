"""What a driver's bookkeeping operations take from a worker (see ``interface.Driver``): its
heartbeat, its stats periods and edge counts.  What the readers get back (``stator status``,
the dashboard, ``/metrics``) is ``_read_records``'s, which a worker never imports.

Frozen and typed, so every reader (``stator status``, the dashboard, ``/metrics``, the
conformance suite) names the same fields and a driver cannot hand back a key the others lack.
``as_row`` gives the stored shape where a reader prints it (``stator status``'s JSON).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Heartbeat:
    """One worker saying it is alive: who, since when, what it runs, what its threads do."""

    worker_id: str
    started: datetime
    now: datetime
    concurrency: int
    models: tuple[str, ...]
    threads: Mapping[str, str]  # thread name -> what it reports doing
    pid: int


@dataclass(frozen=True)
class StatsPeriod:
    """What one worker did for one model in one stats period (a ``stator_stats`` row)."""

    worker_id: str
    model: str
    period_start: datetime
    period_end: datetime
    queue_depth: int = 0
    lag_seconds: float = 0.0
    processed: int = 0
    transitions: int = 0
    errors: int = 0
    timeouts: int = 0
    deleted: int = 0
    lost: int = 0

    def as_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class EdgeCount:
    """How many rows one worker moved along one edge in a stats period (a
    ``stator_edge_stats`` row): the dashboard's rate per edge."""

    worker_id: str
    model: str
    source: str
    target: str
    period_end: datetime
    count: int

    def as_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
