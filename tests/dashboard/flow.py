"""The graph the dashboard tests run: a handler state with retries and a give-up state, an
externally progressed state, two terminal states."""

from __future__ import annotations

from typing import Any

from stator import State, StateGraph


class Flow(StateGraph):
    new = State(retry_after=60, max_attempts=3)
    held = State(externally_progressed=True)
    done = State()
    failed = State()
    new.transitions_to(done)
    new.transitions_to(held)
    new.fails_to(failed)
    held.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        if row.note and row.note.startswith("fail"):
            raise ValueError(row.note)
        return cls.done
