"""Stator: durable state machines stored in your application's own database.

Declare a ``StateGraph``, mix ``stator.sqlalchemy.StatorMixin`` into a model, and run workers
that move every row towards where its graph says it should go.
"""

from typing import TYPE_CHECKING

from ._board import ThreadState
from ._clock import Clock, ManualClock, SystemClock
from ._graph import State, StateGraph
from ._lazy import lazy_names
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

if TYPE_CHECKING:
    from ._stator import CycleReport, Stator
    from ._worker import RunSummary, Worker

# Loaded on first use: they bring in SQLAlchemy (about a quarter of a second on a slow
# machine), which a Django process that only declares graphs and models, or a web request
# that only enqueues, never needs.
_LAZY = {
    "CycleReport": "._stator",
    "Stator": "._stator",
    "RunSummary": "._worker",
    "Worker": "._worker",
}


__getattr__ = lazy_names(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
