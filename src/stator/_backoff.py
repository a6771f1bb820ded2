"""The one backoff rule every retry loop in Stator follows (pure).

The n-th consecutive failure waits ``first * factor**(n-1)`` (``factor`` 2 unless a state
declares its own ``backoff``), never more than ``cap``: a row's handler failures (before
``_policy`` adds its jitter), a task's failed attempts, outages of the database (each worker
activity), the launcher's wake-up listener, and the regeneration of crashed schedulers all
back off this way, so they are tuned and tested in one place.
"""

from __future__ import annotations


def delay(failures: int, first: float, cap: float, factor: float = 2.0) -> float:
    """Seconds to wait after ``failures`` consecutive failures (1 for the first); a ``cap``
    below ``first`` leaves ``first``."""
    ceiling = max(cap, first)
    try:
        grown = first * factor ** max(failures - 1, 0)
    except OverflowError:  # so many failures that the cap was passed long ago
        return float(ceiling)
    return float(min(grown, ceiling))
