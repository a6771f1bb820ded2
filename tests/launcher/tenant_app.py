"""The application the launcher tests run in every tenant database (copied into each test's
``tmp_path``): jobs go a -> b -> done.

``STATOR_TENANT_SLEEP``  seconds each ``a`` handler sleeps (read per call; default 0)
"""

from __future__ import annotations

import os
import time

from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from stator import State, StateGraph, Stator
from stator.sqlalchemy import StatorMixin


class Base(DeclarativeBase):
    pass


class JobGraph(StateGraph):
    a = State(timeout=10, retry_after=0.5)
    b = State(timeout=10, retry_after=0.5)
    done = State()

    a.transitions_to(b)
    b.transitions_to(done)

    @classmethod
    def check_a(cls, job: Job) -> State:
        pause = float(os.environ.get("STATOR_TENANT_SLEEP", "0"))
        if pause:
            time.sleep(pause)
        return cls.b

    @classmethod
    def check_b(cls, job: Job) -> State:
        return cls.done


class Job(StatorMixin, Base):
    __tablename__ = "jobs"
    state_graph = JobGraph

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)


stator = Stator(os.environ.get("STATOR_TENANT_DB", "sqlite:///tenant-unset.db"), models=[Job])
