"""The application of the concurrency-limit process test (copied into the test's
``tmp_path``, run by ``stator run``): deliveries limited to ``LIMIT`` at once per domain.

Each handler records its start and its end, each in a transaction of its own, in
``proc_ledger``; the test reads the intervals back and counts their overlap per domain.
Configured as ``app_fixture`` is (``STATOR_PROC_DB``, ``STATOR_PROC_SLEEP``).
"""

from __future__ import annotations

import os
import time
from datetime import datetime

from sqlalchemy import Float, String, insert, update
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from stator import State, StateGraph, Stator
from stator._types import UTCDateTime
from stator.sqlalchemy import StatorMixin

URL = os.environ.get("STATOR_PROC_DB", "sqlite:///stator-proc-unset.db")
LIMIT = 2


class Base(DeclarativeBase):
    pass


class Ledger(Base):
    """One row per handler run: its start and, once it returned, its end (wall clock)."""

    __tablename__ = "proc_ledger"

    id: Mapped[int] = mapped_column(primary_key=True)
    row_id: Mapped[int]
    domain: Mapped[str] = mapped_column(String(50))
    pid: Mapped[int]
    started: Mapped[float] = mapped_column(Float)
    ended: Mapped[float | None] = mapped_column(Float, nullable=True)


class Deliveries(StateGraph):
    send = State(timeout=10, retry_after=0.5, max_running=LIMIT, limit_key="domain")
    sent = State()
    send.transitions_to(sent)

    @classmethod
    def check_send(cls, job: Job) -> State:
        with stator.engine.begin() as conn:
            run = conn.execute(insert(Ledger.__table__).values(
                row_id=job.id, domain=job.domain, pid=os.getpid(), started=time.time(),
            )).inserted_primary_key[0]
        time.sleep(float(os.environ.get("STATOR_PROC_SLEEP", "0")))
        with stator.engine.begin() as conn:
            conn.execute(update(Ledger.__table__).where(Ledger.__table__.c.id == run)
                         .values(ended=time.time()))
        return cls.sent


class Job(StatorMixin, Base):
    __tablename__ = "proc_jobs"
    state_graph = Deliveries
    stator_lease_column = "leased_until"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    domain: Mapped[str] = mapped_column(String(50))
    leased_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


stator = Stator(URL, models=[Job])
