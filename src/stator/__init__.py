"""Stator: durable state machines stored in your application's own database.

Declare a ``StateGraph``, mix ``stator.sqlalchemy.StatorMixin`` into a model, and run workers
that move every row towards where its graph says it should go.
"""

from typing import TYPE_CHECKING, Any

from ._board import ThreadState
from ._clock import Clock, ManualClock, SystemClock
from ._graph import State, StateGraph
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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stator' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


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
