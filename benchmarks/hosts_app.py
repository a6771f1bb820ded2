"""The application ``benchmarks/hosts.py`` runs on its namespace hosts: rows go a -> b -> c
-> done through no-op handlers (the engine's fast path: results written back in batches).
The database URL comes from ``STATOR_BENCH_DB``."""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from stator import State, StateGraph, Stator
from stator.sqlalchemy import StatorMixin


class Base(DeclarativeBase):
    pass


class Steps(StateGraph):
    a = State(timeout=10)
    b = State(timeout=10)
    c = State(timeout=10)
    done = State()
    a.transitions_to(b)
    b.transitions_to(c)
    c.transitions_to(done)

    @classmethod
    def check_a(cls, row: Any) -> State:
        return cls.b

    @classmethod
    def check_b(cls, row: Any) -> State:
        return cls.c

    @classmethod
    def check_c(cls, row: Any) -> State:
        return cls.done


class HostRow(StatorMixin, Base):
    __tablename__ = "host_rows"
    state_graph = Steps
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)


stator = Stator(os.environ.get("STATOR_BENCH_DB", "sqlite:///unset.db"), models=[HostRow])
