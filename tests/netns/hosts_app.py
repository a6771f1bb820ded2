"""The application the namespace hosts run (copied into each test's ``tmp_path``).

Rows go a -> b -> c -> done.  Each handler first locks its own row through its session
(``SELECT … FOR UPDATE``, as a handler that reads before it decides does), then sleeps
``STATOR_PROC_SLEEP`` seconds, then adds one ``Ledger`` row in the same session: a committed
transition leaves exactly one ledger row.  While the handler sleeps, its session sits "idle in
transaction" holding the row lock: a host cut off at that moment strands the lock on the
server, which is the case ``idle_in_transaction_session_timeout`` exists for.

Configured like ``tests/processes/app_fixture.py``: ``STATOR_PROC_DB``, ``STATOR_PROC_TIMEOUT``,
``STATOR_PROC_SLEEP``, ``STATOR_PROC_TRACE``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from sqlalchemy import JSON, String, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from stator import State, StateGraph, Stator
from stator.sqlalchemy import StatorMixin

URL = os.environ.get("STATOR_PROC_DB", "sqlite:///stator-proc-unset.db")
TIMEOUT = float(os.environ.get("STATOR_PROC_TIMEOUT", "10"))
STEPS = ("a", "b", "c")


class Base(DeclarativeBase):
    pass


class Ledger(Base):
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
    session = Session.object_session(job)
    assert session is not None
    session.execute(select(Job.id).where(Job.id == job.id).with_for_update())
    time.sleep(float(os.environ.get("STATOR_PROC_SLEEP", "0")))
    session.add(Ledger(row_id=job.id, step=step, pid=os.getpid()))


class JobGraph(StateGraph):
    a = State(timeout=TIMEOUT, retry_after=0.5)
    b = State(timeout=TIMEOUT, retry_after=0.5)
    c = State(timeout=TIMEOUT, retry_after=0.5)
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


stator = Stator(URL, models=[Job])
