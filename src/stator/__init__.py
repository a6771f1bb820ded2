"""Stator: durable state machines stored in your application's own database.

Declare a ``StateGraph``, mix ``stator.sqlalchemy.StatorMixin`` into a model, and run workers
that move every row towards where its graph says it should go.
"""

from ._board import ThreadState
from ._clock import Clock, ManualClock, SystemClock
from ._graph import State, StateGraph
from ._stator import CycleReport, Stator
from ._worker import RunSummary, Worker
from .errors import (
    ConfigError,
    GraphError,
    PlainRowError,
    SchemaError,
    StatorError,
    TransitionConflict,
    TransitionError,
    TryAgainLater,
)

__all__ = [
    "Clock",
    "ConfigError",
    "CycleReport",
    "GraphError",
    "ManualClock",
    "PlainRowError",
    "RunSummary",
    "SchemaError",
    "State",
    "StateGraph",
    "Stator",
    "StatorError",
    "SystemClock",
    "ThreadState",
    "TransitionConflict",
    "TransitionError",
    "TryAgainLater",
    "Worker",
]
