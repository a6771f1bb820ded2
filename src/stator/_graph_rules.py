"""The rules each state of a graph is checked against when its graph class is created: its
role (a handler or not), its timings, attempts, limits and plain rows.  Pure, like
``_graph.py``, which calls ``state_problems`` and raises the first problem as a
``GraphError`` naming the graph and the state."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ._limits import limit_problems
from ._plain_rows import plain_rows_problems

if TYPE_CHECKING:
    from ._graph import State


def state_problems(state: State) -> Iterator[str]:
    if state._init_problem:
        yield state._init_problem
    if state.terminal and state.automatic:
        yield "a terminal state (no transitions out) cannot have a handler"
    if state.externally_progressed and state.automatic:
        yield "an externally_progressed state cannot have a handler"
    if not state.terminal and not state.externally_progressed and not state.automatic:
        yield (
            f"has transitions out but no handler: define check_{state.name} on the graph "
            "or mark it State(externally_progressed=True)"
        )
    yield from _timing_problems(state)
    if state.max_attempts is not None and state.exhausted_to is None:
        yield (
            f"max_attempts is set: declare where exhausted rows go with "
            f"{state.name}.fails_to(...)"
        )
    if state.exhausted_to is not None and state.max_attempts is None:
        yield "fails_to(...) needs State(max_attempts=N)"
    if state.max_attempts is not None and not state.automatic:
        yield "max_attempts only applies to a state with a handler"
    yield from limit_problems(state.max_running, state.limit_key, state.automatic)
    yield from plain_rows_problems(state.declared_plain_rows, state.automatic)


def _timing_problems(state: State) -> Iterator[str]:
    if not state.retry_after > 0:
        yield f"retry_after must be > 0 seconds (got {state.retry_after})"
    if state.start_after < 0:
        yield f"start_after must be >= 0 seconds (got {state.start_after})"
    if state.delete_after is not None and not state.delete_after > 0:
        yield f"delete_after must be > 0 seconds (got {state.delete_after})"
    if not state.timeout > 0:
        yield f"timeout must be > 0 seconds (got {state.timeout})"
    if state.backoff < 1:
        yield f"backoff must be >= 1 (got {state.backoff})"
    if state.max_retry_after < state.retry_after:
        yield "max_retry_after must be >= retry_after"
    if state.max_attempts is not None and state.max_attempts < 1:
        yield f"max_attempts must be >= 1 (got {state.max_attempts})"
    if state.timed_edge is not None and not state.timed_edge.seconds > 0:
        yield f"times_out_to needs seconds > 0 (got {state.timed_edge.seconds})"
