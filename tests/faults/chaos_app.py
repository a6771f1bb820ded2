"""An application whose handlers misbehave on purpose (copied into each test's ``tmp_path``
and run by real worker processes, like ``tests/processes/app_fixture.py``).

Each row's ``kind`` says how it misbehaves; ``ok`` rows go a -> b -> c -> done, adding one
ledger row per committed step.  Step b's handler is ``async``, a and c are sync.  Every
automatic state gives up after ``ATTEMPTS`` consecutive failures and moves the row to
``failed``.  Environment: ``STATOR_PROC_DB``, ``STATOR_PROC_TIMEOUT`` (the handler deadline)
and ``STATOR_PROC_TRACE`` as for ``app_fixture``.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from sqlalchemy import String
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from stator import State, StateGraph, Stator
from stator.sqlalchemy import StatorMixin

URL = os.environ.get("STATOR_PROC_DB", "sqlite:///stator-chaos-unset.db")
TIMEOUT = float(os.environ.get("STATOR_PROC_TIMEOUT", "1"))
ATTEMPTS = 3
HANG = 60.0  # how long a hanging handler sleeps: far past its deadline

# kind -> (the state it fails in, failure kind recorded, a fragment of the message)
FAILS: dict[str, tuple[str, str, str]] = {
    "raise": ("a", "error", "ValueError: job {id}: cannot handle this row"),
    "exit": ("a", "error", "SystemExit: job {id}: a handler that ends its thread"),
    "hang_sync": ("a", "timeout", "handler did not finish within"),
    "bad_state": ("a", "invalid", "handler returned 'done', but ChaosGraph.a may only move to"),
    "no_state": ("a", "invalid", "handler returned 'shipped', but ChaosGraph.a may only move"),
    "garbage": ("a", "invalid", "handler returned [42]; expected a State, a state name or None"),
    "hang_async": ("b", "timeout", "handler did not finish within"),
    "raise_async": ("b", "error", "KeyError: 'job {id}'"),
    "garbage_c": ("c", "invalid", "handler returned <object object at"),
}


class Base(DeclarativeBase):
    pass


class Ledger(Base):
    """One row per handler whose transition was committed."""

    __tablename__ = "chaos_ledger"

    id: Mapped[int] = mapped_column(primary_key=True)
    row_id: Mapped[int]
    step: Mapped[str] = mapped_column(String(10))
    pid: Mapped[int]


def _enter(job: Job, step: str) -> None:
    """Note in the trace that a handler started (``row_id step pid``)."""
    trace = os.environ.get("STATOR_PROC_TRACE")
    if trace:
        with open(trace, "a") as f:
            f.write(f"{job.id} {step} {os.getpid()}\n")


def _record(job: Job, step: str) -> None:
    """Add the step's ledger row, committed with its transition or not at all."""
    session = Session.object_session(job)
    assert session is not None
    session.add(Ledger(row_id=job.id, step=step, pid=os.getpid()))


class ChaosGraph(StateGraph):
    a = State(timeout=TIMEOUT, retry_after=0.2, backoff=1.0, max_attempts=ATTEMPTS)
    b = State(timeout=TIMEOUT, retry_after=0.2, backoff=1.0, max_attempts=ATTEMPTS)
    c = State(timeout=TIMEOUT, retry_after=0.2, backoff=1.0, max_attempts=ATTEMPTS)
    done = State()
    failed = State()

    a.transitions_to(b)
    b.transitions_to(c)
    c.transitions_to(done)
    a.fails_to(failed)
    b.fails_to(failed)
    c.fails_to(failed)

    @classmethod
    def check_a(cls, job: Job) -> Any:
        _enter(job, "a")
        kind = job.kind
        if kind == "raise":
            raise ValueError(f"job {job.id}: cannot handle this row")
        if kind == "exit":
            raise SystemExit(f"job {job.id}: a handler that ends its thread")
        if kind == "hang_sync":
            time.sleep(HANG)
        if kind == "bad_state":
            return cls.done
        if kind == "no_state":
            return "shipped"
        if kind == "garbage":
            return [42]
        if kind == "flaky" and job.state_attempts < ATTEMPTS - 1:
            raise RuntimeError(f"job {job.id}: not this time")
        _record(job, "a")
        return cls.b

    @classmethod
    async def check_b(cls, job: Job) -> Any:
        _enter(job, "b")
        if job.kind == "hang_async":
            await asyncio.sleep(HANG)
        if job.kind == "raise_async":
            raise KeyError(f"job {job.id}")
        _record(job, "b")
        return cls.c

    @classmethod
    def check_c(cls, job: Job) -> Any:
        _enter(job, "c")
        if job.kind == "garbage_c":
            return object()
        _record(job, "c")
        return cls.done


class Job(StatorMixin, Base):
    __tablename__ = "chaos_jobs"
    state_graph = ChaosGraph

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    kind: Mapped[str] = mapped_column(String(20), default="ok")


stator = Stator(URL, models=[Job])
