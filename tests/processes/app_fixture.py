"""The application the worker-process tests run (copied into each test's ``tmp_path``).

Configured by environment variables, read when the module is imported:

``STATOR_PROC_DB``       the database URL
``STATOR_PROC_TIMEOUT``  the handler timeout of every automatic state (the lease is twice it)
``STATOR_PROC_SLEEP``    how long each handler sleeps before it finishes (read per call)
``STATOR_PROC_TRACE``    a file each handler appends ``row_id step pid`` to when it starts

Every handler adds one ``Ledger`` row in the row's own session, so the ledger row is
committed together with the transition or not at all: a committed transition leaves exactly
one ledger row, whatever happened to the worker.
"""

from __future__ import annotations

import os
import time
from typing import Any

from sqlalchemy import JSON, String
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from stator import State, StateGraph, Stator
from stator.sqlalchemy import StatorMixin

URL = os.environ.get("STATOR_PROC_DB", "sqlite:///stator-proc-unset.db")
TIMEOUT = float(os.environ.get("STATOR_PROC_TIMEOUT", "10"))
RETRY = 0.5  # a failed or busy step is retried soon, so no test waits out a long backoff


class Base(DeclarativeBase):
    pass


class Ledger(Base):
    """One row per handler whose transition was committed."""

    __tablename__ = "proc_ledger"

    id: Mapped[int] = mapped_column(primary_key=True)
    row_id: Mapped[int]
    step: Mapped[str] = mapped_column(String(10))
    pid: Mapped[int]


def _step(job: Job, step: str) -> None:
    trace = os.environ.get("STATOR_PROC_TRACE")
    if trace:
        with open(trace, "a") as f:
            f.write(f"{job.id} {step} {os.getpid()}\n")
    pause = float(os.environ.get("STATOR_PROC_SLEEP", "0"))
    if pause:
        time.sleep(pause)
    session = Session.object_session(job)
    assert session is not None
    session.add(Ledger(row_id=job.id, step=step, pid=os.getpid()))


class JobGraph(StateGraph):
    a = State(timeout=TIMEOUT, retry_after=RETRY)
    b = State(timeout=TIMEOUT, retry_after=RETRY)
    c = State(timeout=TIMEOUT, retry_after=RETRY)
    done = State()

    a.transitions_to(b)
    b.transitions_to(c)
    c.transitions_to(done)

    @classmethod
    def check_a(cls, job: Job) -> State:
        _step(job, "a")
        return cls.b

    @classmethod
    def check_b(cls, job: Job) -> State:
        _step(job, "b")
        return cls.c

    @classmethod
    def check_c(cls, job: Job) -> State:
        _step(job, "c")
        return cls.done


class Job(StatorMixin, Base):
    __tablename__ = "proc_jobs"
    state_graph = JobGraph

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    state_history: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)


AUTOMATIC = ("a", "b", "c")
STEPS = AUTOMATIC

stator = Stator(URL, models=[Job])
