"""The one backoff rule every retry loop in Stator follows (pure).

The n-th consecutive failure waits ``first * 2**(n-1)``, never more than ``cap``: outages of
the database (each worker activity), the launcher's wake-up listener, and the regeneration
of crashed schedulers all back off this way, so they are tuned and tested in one place.
"""

from __future__ import annotations

MAX_DOUBLINGS = 30  # beyond this the cap applies anyway; keeps 2**n a small float


def delay(failures: int, first: float, cap: float) -> float:
    """Seconds to wait after ``failures`` consecutive failures (1 for the first)."""
    return float(min(first * 2.0 ** min(max(failures - 1, 0), MAX_DOUBLINGS), max(cap, first)))
