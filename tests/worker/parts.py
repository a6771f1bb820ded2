"""What the tests of the worker's parts share: graphs, rows, and bounded waits on the events
the parts set (never a sleep as synchronisation)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from stator import State, StateGraph, Stator

PATIENCE = 30.0  # seconds any wait below gives up after (a failure, never a pass)


class Quick(StateGraph):
    new = State(timeout=10, retry_after=600)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        return cls.done


def insert(stator: Stator, model: Any, *pks: int, note: str | None = None) -> None:
    with Session(stator.engine) as session:
        session.add_all([model(id=pk, note=note) for pk in pks])
        session.commit()


def states(stator: Stator, model: Any) -> dict[int, str]:
    with Session(stator.engine) as session:
        return {r.id: r.state for r in session.scalars(select(model))}


def wait_for(predicate: Callable[[], bool], what: str, step: Callable[[], object]) -> None:
    """Run ``step`` (which blocks on an event, bounded) until ``predicate`` holds."""
    deadline = time.monotonic() + PATIENCE
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {PATIENCE:g}s")
        step()
