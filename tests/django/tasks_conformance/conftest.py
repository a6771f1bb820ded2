"""The backends the conformance suite runs against, behind one small harness.

``backend`` runs each backend-neutral test three times: Stator on SQLite, Stator on
PostgreSQL, and Django's own ``ImmediateBackend`` (which runs a task at enqueue), so that the
expectations are shown to be Django's and not ours.  ``stator_backend`` runs the tests of
behaviour the immediate backend does not have (results read back, deferral, priority order,
retries) on Stator's two databases only.  Stator's tasks are run in-process by the engine's
inline cycle with a manual clock; the real ``runstator`` is in ``test_conformance_worker.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("django.tasks", reason="the task backend needs Django >= 6.0")

from django.tasks import TaskResult
from django.test import override_settings

from stator import ManualClock
from stator.django._setup import build_stator
from stator.django._task_model import StatorTask

from .jobs import QUEUES

STATOR = "stator.django.tasks.StatorBackend"
IMMEDIATE = "django.tasks.backends.immediate.ImmediateBackend"


@dataclass
class Harness:
    """One backend under test: how to let its worker run, and how to read a result back."""

    name: str
    alias: str | None = None  # the database Stator keeps its tasks in
    clock: ManualClock | None = None

    @property
    def immediate(self) -> bool:
        return self.alias is None

    def drain(self, cycles: int = 6) -> None:
        """Let a worker run every due task (the immediate backend already has)."""
        if self.alias is None:
            return
        stator = build_stator(models=[StatorTask], clock=self.clock, alias=self.alias)
        for _ in range(cycles):
            stator.run_once()

    def advance(self, seconds: float) -> None:
        assert self.clock is not None
        self.clock.advance(seconds)

    def finished(self, result: TaskResult) -> TaskResult:
        """``result`` once a worker has run its task, as a reader elsewhere sees it."""
        if self.immediate:
            return result
        self.drain()
        return result.task.get_result(result.id)


def _settings(backend: str, options: dict[str, object]) -> dict[str, object]:
    return {"default": {"BACKEND": backend, "QUEUES": QUEUES, "OPTIONS": options}}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC) + timedelta(seconds=1))


def _stator_harness(alias: str, clock: ManualClock, max_attempts: int) -> Iterator[Harness]:
    with override_settings(
        TASKS=_settings(STATOR, {"max_attempts": max_attempts, "retry_after": 10}),
        STATOR={"CONCURRENCY": 2, "DATABASE": alias},
    ):
        yield Harness(f"stator-{alias}", alias, clock)


@pytest.fixture(params=["default", "pg", "immediate"],
                ids=["stator-sqlite", "stator-pg", "immediate"])
def backend(request: pytest.FixtureRequest, clock: ManualClock) -> Iterator[Harness]:
    if request.param == "immediate":
        with override_settings(TASKS=_settings(IMMEDIATE, {})):
            yield Harness("immediate")
        return
    request.getfixturevalue("django_db_blocker")  # the databases come from the mark
    yield from _stator_harness(request.param, clock, max_attempts=1)


@pytest.fixture(params=["default", "pg"], ids=["stator-sqlite", "stator-pg"])
def stator_backend(request: pytest.FixtureRequest, clock: ManualClock) -> Iterator[Harness]:
    yield from _stator_harness(request.param, clock, max_attempts=1)


@pytest.fixture(params=["default", "pg"], ids=["stator-sqlite", "stator-pg"])
def retrying_backend(request: pytest.FixtureRequest, clock: ManualClock) -> Iterator[Harness]:
    """Stator with three attempts per task (retries back off from 10 s)."""
    yield from _stator_harness(request.param, clock, max_attempts=3)
