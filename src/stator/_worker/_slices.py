"""Slices: how the handler pool hands sync rows to its threads, a slice at a time.

One queue hand-off per slice rather than per row: the queue's wake-up and the thread switch
cost more than a no-op handler.  A slice holds about ``SLICE_SECONDS`` of handler time, so a
row waits little behind the others of its slice; and a thread whose slice is done takes rows
from the end of the others' slices before it waits, so no row waits behind a slow one while a
thread is free.  A slice is a ``deque``: its thread takes from the left, a free thread from the
right, the pool (a stop, a thread abandoned or dead) everything left; each pop is atomic, so
every row is taken exactly once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from .._execute import Task

SLICE_SECONDS = 0.005

Slice = deque[Task]


class Taken:
    """How many rows one handler thread has taken (from its slices or others'): written by
    that thread alone, so without a lock; the pool sums every thread's."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


def slice_size(rows: int, concurrency: int, timed: bool, average: float) -> int:
    """Rows per hand-off: ``rows`` shared between the threads, a slice holding no more than
    ``SLICE_SECONDS`` of handler time; one row per slice until handlers are ``timed``."""
    if not timed:
        return 1
    by_time = int(SLICE_SECONDS / max(average, 1e-6))
    return max(1, min(-(-rows // concurrency), by_time))


def next_row(own: Slice, slices: Mapping[str, Slice]) -> Task | None:
    """The next row of a thread's own slice; once that is done, one from the end of another
    of ``slices`` (each thread's); None when every slice is done."""
    try:
        return own.popleft()
    except IndexError:
        pass
    for other in list(slices.values()):  # a copy: the threads change the mapping
        if other is not own:
            try:
                return other.pop()
            except IndexError:
                continue
    return None


def take_all(tasks: Slice | None) -> list[Task]:
    """The rows left in ``tasks``, taken from it."""
    taken = []
    while tasks:
        try:
            taken.append(tasks.popleft())
        except IndexError:
            break
    return taken
