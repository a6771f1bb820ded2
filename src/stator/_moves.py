"""The one rule for a move made outside a handler (application code, an operator): may a row
move, from which states, and what its columns become.

Pure: no database, no clock of its own.  Every application-side and operator move (the
SQLAlchemy and Django APIs, the dashboard, the Django admin) asks here first, then hands the
answer to the one applying part (``_store/_apply_move.py``), so the edge check, the values
and the history entry cannot differ between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ._graph import State, StateGraph
from ._policy import first_due
from .errors import TransitionError


@dataclass(frozen=True)
class Move:
    """A checked move: rows in one of ``sources`` become ``values``, with
    ``history_entry`` appended to their history where they keep one."""

    target: State
    sources: tuple[str, ...]
    now: datetime

    @property
    def values(self) -> dict[str, Any]:
        """The state columns after the move: entered now, due when the target first needs
        the engine, no failures counted against it."""
        return {
            "state": self.target.name, "state_changed": self.now,
            "state_next": first_due(self.target, self.now), "state_attempts": 0,
        }

    @property
    def history_entry(self) -> tuple[str, str]:
        """The ``[state, changed]`` pair appended to ``state_history``."""
        return self.target.name, self.now.isoformat()


def along_edge(graph: type[StateGraph], current: str, to: State | str, now: datetime) -> Move:
    """One row, seen in ``current``, moved to ``to``: only along an edge of ``graph``."""
    name = to.name if isinstance(to, State) else to
    state = graph.states.get(current)
    target = graph.states.get(name)
    if state is None or target is None or name not in state.children:
        raise TransitionError(f"{graph.__name__}: no transition from {current} to {name}")
    return Move(target, (state.name,), now)


def into(graph: type[StateGraph], to: State | str, now: datetime) -> Move:
    """Any number of rows moved to ``to``: those in a state with an edge to it."""
    target = graph.get_state(to)
    sources = tuple(s.name for s in target.parents.values())
    if not sources:
        raise TransitionError(f"{graph.__name__}: no state has a transition to {target.name}")
    return Move(target, sources, now)


def retryable(graph: type[StateGraph], state: str) -> None:
    """Refuse an operator's "retry now" on rows the engine does not run."""
    if state not in {s.name for s in graph.scheduled_states()}:
        raise TransitionError(f"rows in {state} are not run by the engine: nothing to retry")
