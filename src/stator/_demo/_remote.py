"""The demo's unreliable remote server: slow, failing at a set rate, sometimes asking to
slow down; one at a time per process, since the graphs' handlers are classes that cannot be
handed it."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import TryAgainLater

THROTTLE_DELAY = 0.5
THROTTLE_SHARE = 0.2  # of failure_rate: how often the remote says "slow down" instead


class RemoteError(Exception):
    """The simulated server refused a delivery; Stator retries it with backoff."""


@dataclass
class FlakyRemote:
    """Stands in for followers' servers: slow, and failing at ``failure_rate``.

    Every random draw comes from one seeded generator, so a run's failures are reproducible
    up to the order in which the worker happens to call it.
    """

    failure_rate: float
    seed: int = 0
    latency: float = 0.08  # mean seconds per call
    calls: int = 0
    failures: int = 0
    throttled: int = 0
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if not 0.0 <= self.failure_rate <= 1.0:
            raise ValueError(f"failure_rate must be between 0 and 1 (got {self.failure_rate})")
        self._rng = random.Random(self.seed)

    async def deliver(self, follower: str) -> None:
        """Pretend to POST to the follower's server; raise the way a real client would."""
        delay, outcome = self._draw()
        await asyncio.sleep(delay)
        if outcome == "fail":
            server = follower.rsplit("@", 1)[-1]
            raise RemoteError(f"{server} answered 503 Service Unavailable")
        if outcome == "throttle":
            raise TryAgainLater(THROTTLE_DELAY)  # not a failure: no backoff, streak starts over

    def _draw(self) -> tuple[float, str]:
        with self._lock:
            self.calls += 1
            delay = self._rng.uniform(0.5, 1.5) * self.latency
            roll = self._rng.random()
            if roll < self.failure_rate * THROTTLE_SHARE:
                self.throttled += 1
                return delay, "throttle"
            if roll < self.failure_rate:
                self.failures += 1
                return delay, "fail"
            return delay, "ok"


_active: FlakyRemote | None = None  # the remote of the demo now running (one at a time)


def current() -> FlakyRemote:
    if _active is None:
        raise RuntimeError("no demo is running")
    return _active


@contextlib.contextmanager
def using(remote: FlakyRemote) -> Iterator[None]:
    """Make ``remote`` the one handlers talk to (graphs are classes, so it cannot be passed
    to them), and make sure a finished demo leaves none behind."""
    global _active
    if _active is not None:
        raise RuntimeError("another demo is already running in this process")
    _active = remote
    try:
        yield
    finally:
        _active = None
