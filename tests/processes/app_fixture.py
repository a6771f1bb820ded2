"""The application the worker-process tests run (copied into each test's ``tmp_path``).

Configured by environment variables, read when the module is imported:

``STATOR_PROC_DB``       the database URL
``STATOR_PROC_TIMEOUT``  the handler timeout of every automatic state (the lease is twice it)
``STATOR_PROC_SLEEP``    how long each handler sleeps before it finishes (read per call)
``STATOR_PROC_TRACE``    a file each handler appends ``row_id step pid`` to when it starts

and, for the fault tests (``tests/faults/``), all off by default:

``STATOR_PROC_CLOCK_OFFSET``  seconds this process's clock is ahead (negative: behind) of
                              real time, as on a worker machine whose clock is off
``STATOR_PROC_FLAKY``         ``N``: on every N-th row (id divisible by N) step b says "not
                              yet" once (recording a ``wait`` ledger row) and step c fails
                              once before succeeding
``STATOR_PROC_OVERRUN``       ``N``: on every N-th row (id divisible by N, plus one) the
                              first attempt of step a sleeps past its deadline: abandoned,
                              recorded as a timeout, retried
``STATOR_PROC_DIE_AFTER``     ``LOW-HIGH``: the process SIGKILLs itself at a random database
                              commit between the LOW-th and the HIGH-th, just before or just
                              after it, and notes it in ``STATOR_PROC_KILL_LOG``

Every handler adds one ``Ledger`` row in the row's own session, so the ledger row is
committed together with the transition or not at all: a committed transition leaves exactly
one ledger row, whatever happened to the worker.  ``cancelled`` is reached only by
application code (``transition_perform``), never by a handler.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import JSON, Engine, String, event, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from stator import State, StateGraph, Stator
from stator.sqlalchemy import StatorMixin

URL = os.environ.get("STATOR_PROC_DB", "sqlite:///stator-proc-unset.db")
TIMEOUT = float(os.environ.get("STATOR_PROC_TIMEOUT", "10"))
CLOCK_OFFSET = float(os.environ.get("STATOR_PROC_CLOCK_OFFSET", "0"))
FLAKY = int(os.environ.get("STATOR_PROC_FLAKY", "0"))
DIE_AFTER = os.environ.get("STATOR_PROC_DIE_AFTER", "")
OVERRUN = int(os.environ.get("STATOR_PROC_OVERRUN", "0"))
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


def _trace(job: Job, step: str) -> None:
    trace = os.environ.get("STATOR_PROC_TRACE")
    if trace:
        with open(trace, "a") as f:
            f.write(f"{job.id} {step} {os.getpid()}\n")


def _step(job: Job, step: str) -> None:
    _trace(job, step)
    pause = float(os.environ.get("STATOR_PROC_SLEEP", "0"))
    if pause:
        time.sleep(pause)
    session = Session.object_session(job)
    assert session is not None
    session.add(Ledger(row_id=job.id, step=step, pid=os.getpid()))


def flaky(row_id: int, every: int) -> bool:
    return every > 0 and row_id % every == 0


def steps_of(row_id: int, flaky_every: int = 0) -> tuple[str, ...]:
    """The ledger steps a row leaves when it reaches done (``STATOR_PROC_FLAKY``)."""
    return FLAKY_STEPS if flaky(row_id, flaky_every) else STEPS


def _waited(job: Job) -> bool:
    session = Session.object_session(job)
    assert session is not None
    found = select(Ledger.id).where(Ledger.row_id == job.id, Ledger.step == "wait")
    return session.scalar(found) is not None


class JobGraph(StateGraph):
    a = State(timeout=TIMEOUT, retry_after=RETRY)
    b = State(timeout=TIMEOUT, retry_after=RETRY)
    c = State(timeout=TIMEOUT, retry_after=RETRY)
    done = State()
    cancelled = State()

    a.transitions_to(b)
    b.transitions_to(c)
    c.transitions_to(done)
    a.transitions_to(cancelled)
    b.transitions_to(cancelled)
    c.transitions_to(cancelled)

    @classmethod
    def check_a(cls, job: Job) -> State:
        if OVERRUN and job.id % OVERRUN == 1 and job.state_attempts == 0:
            _trace(job, "overrun")
            time.sleep(TIMEOUT * 1.5)  # past the deadline: this result is discarded
        _step(job, "a")
        return cls.b

    @classmethod
    def check_b(cls, job: Job) -> State | None:
        if flaky(job.id, FLAKY) and not _waited(job):
            _step(job, "wait")
            return None  # "not yet": retried after RETRY seconds, by this worker's clock
        _step(job, "b")
        return cls.c

    @classmethod
    def check_c(cls, job: Job) -> State:
        if flaky(job.id, FLAKY) and job.state_attempts == 0:
            _trace(job, "fail")
            raise RuntimeError(f"job {job.id}: the first attempt of step c fails")
        _step(job, "c")
        return cls.done


class Job(StatorMixin, Base):
    __tablename__ = "proc_jobs"
    state_graph = JobGraph

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    state_history: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)


AUTOMATIC = ("a", "b", "c")
STEPS = AUTOMATIC
FLAKY_STEPS = ("a", "wait", "b", "c")


class OffsetClock:
    """The wall clock of a machine whose clock is ``offset`` seconds off."""

    def __init__(self, offset: float) -> None:
        self.offset = timedelta(seconds=offset)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset


def _die_at_a_commit(engine: Engine, spec: str) -> None:
    """SIGKILL this process at the n-th commit (n random in LOW-HIGH), mid-write: just before
    the commit reaches the database, or just after it did but before the worker knew."""
    low, _, high = spec.partition("-")
    target = random.randint(int(low), int(high or low))
    after = random.random() < 0.5
    lock = threading.Lock()
    seen = [0]
    local = threading.local()

    def die(moment: str) -> None:
        log = os.environ.get("STATOR_PROC_KILL_LOG")
        if log:
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {moment} {target}\n")
        os.kill(os.getpid(), signal.SIGKILL)

    @event.listens_for(engine, "commit")
    def _on_commit(_conn: Any) -> None:
        with lock:
            seen[0] += 1
            hit = seen[0] == target
        if hit and not after:
            die("before-commit")
        local.committed = hit

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_conn: Any, _record: Any) -> None:
        if getattr(local, "committed", False):
            die("after-commit")


stator = Stator(URL, models=[Job], clock=OffsetClock(CLOCK_OFFSET) if CLOCK_OFFSET else None)
if DIE_AFTER:
    _die_at_a_commit(stator.engine, DIE_AFTER)
