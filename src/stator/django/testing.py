"""Helpers for the project's own tests (Django ``TestCase`` or pytest-django).

``run_until_idle()`` runs the engine inline, in the test's thread and inside the test's
transaction, until nothing is due: handlers' errors are recorded like in a worker and, by
default, the first one is raised.  Pass a ``ManualClock`` (started a little ahead of real
time, since new rows get the database's clock) and ``advance`` it to jump over
``retry_after``, backoff and ``start_after``::

    clock = ManualClock(timezone.now() + timedelta(seconds=1))
    order = Order.objects.create(paid=True)
    run_until_idle(clock=clock)
    assert_path(order, "new", "charged", "shipped")
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._clock import Clock
from .._graph import State
from .._stator import CycleReport
from ._setup import build_stator

MAX_CYCLES = 1000


def run_until_idle(
    *, clock: Clock | None = None, models: Sequence[type] | None = None,
    raise_errors: bool = True, using: str | None = None, max_cycles: int = MAX_CYCLES,
) -> CycleReport:
    """Run inline cycles until a cycle claims nothing; returns what they did in total."""
    stator = build_stator(models=models, clock=clock, alias=using)
    total = CycleReport()
    for _ in range(max_cycles):
        report = stator.run_once(raise_errors=raise_errors)
        total.claimed += report.claimed
        total.transitions += report.transitions
        total.errors += report.errors
        total.lost += report.lost
        for name, count in report.per_model.items():
            total.per_model[name] = total.per_model.get(name, 0) + count
        if not report.claimed:
            return total
    raise AssertionError(f"still busy after {max_cycles} cycles: a handler that never rests?")


def path_of(obj: Any) -> list[str]:
    """The states the row entered, in order, read fresh from its ``state_history``."""
    obj.refresh_from_db(fields=["state", "state_history"])
    return [entry[0] for entry in (obj.state_history or [])]


def assert_path(obj: Any, *states: State | str, initial: bool = True) -> None:
    """Assert the row went exactly through ``states`` (its initial state first, unless
    ``initial=False``) and is in the last of them.  Needs a ``state_history`` JSONField."""
    names = [s.name if isinstance(s, State) else s for s in states]
    walked = path_of(obj)
    start = type(obj).state_graph.initial_state.name
    seen = [start, *walked] if initial else walked
    if seen != names or (names and obj.state != names[-1]):
        raise AssertionError(
            f"{type(obj).__name__} {obj.pk!r} went {' -> '.join(seen) or '(nowhere)'} "
            f"and is in {obj.state!r}; expected {' -> '.join(names)}"
        )
