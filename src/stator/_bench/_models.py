"""The models the benchmark runs, importable by name so worker child processes can load them.

Every handler is as cheap as a handler can be, so what is measured is the engine (claiming,
dispatching, writing back) and the database, not application code.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from sqlalchemy import Float, Integer, String
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from .._graph import State, StateGraph
from .._types import UTCDateTime
from ..sqlalchemy import StatorMixin


class _Base(DeclarativeBase):
    pass


class BenchStates(StateGraph):
    """Three no-op steps: every row makes three transitions."""

    first = State(timeout=30)
    second = State(timeout=30)
    third = State(timeout=30)
    done = State()

    first.transitions_to(second)
    second.transitions_to(third)
    third.transitions_to(done)

    @classmethod
    def check_first(cls, row: Any) -> State:
        return cls.second

    @classmethod
    def check_second(cls, row: Any) -> State:
        return cls.third

    @classmethod
    def check_third(cls, row: Any) -> State:
        return cls.done


class BenchRow(StatorMixin, _Base):
    __tablename__ = "stator_bench_rows"
    state_graph = BenchStates
    id: Mapped[int] = mapped_column(primary_key=True)


class BenchPlainStates(StateGraph):
    """The same three no-op steps, their handlers given plain rows (``plain_rows``): what
    the ORM object costs is the difference (``stator bench --plain-rows``)."""

    plain_rows = True
    first = State(timeout=30)
    second = State(timeout=30)
    third = State(timeout=30)
    done = State()

    first.transitions_to(second)
    second.transitions_to(third)
    third.transitions_to(done)

    check_first = BenchStates.__dict__["check_first"]
    check_second = BenchStates.__dict__["check_second"]
    check_third = BenchStates.__dict__["check_third"]


class BenchPlainRow(StatorMixin, _Base):
    __tablename__ = "stator_bench_plain_rows"
    state_graph = BenchPlainStates
    id: Mapped[int] = mapped_column(primary_key=True)


# The models of the three steps, by the objects their handlers get.
STEP_MODELS: dict[str, type] = {"orm": BenchRow, "plain": BenchPlainRow}

# The same steps, spelled out for the engine-free loop of the "limit" scenario.
NEXT_STATE = {"first": "second", "second": "third", "third": "done"}


class LatencyStates(StateGraph):
    """Rows wait until the application moves them to ``go``; the handler notes when it
    started, which is what the latency scenario measures against the commit."""

    waiting = State(externally_progressed=True)
    go = State(timeout=30)
    done = State()

    waiting.transitions_to(go)
    go.transitions_to(done)

    @classmethod
    def check_go(cls, row: Any) -> State:
        row.started_at = time.time()  # first thing: "handler start"
        return cls.done


class LatencyRow(StatorMixin, _Base):
    __tablename__ = "stator_bench_latency"
    state_graph = LatencyStates
    id: Mapped[int] = mapped_column(primary_key=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class FanOut:
    """How many child rows each parent creates; set in the worker process from its spec."""

    children_per_parent = 10


class FanParentStates(StateGraph):
    """Takahē's hot path: one post fans out to K inbox rows, in the handler's own session,
    committed together with the parent's transition."""

    new = State(timeout=30)
    done = State()

    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        session = Session.object_session(row)
        assert session is not None
        session.add_all(
            [FanChild(parent_id=row.id) for _ in range(FanOut.children_per_parent)]
        )
        return cls.done


class FanChildStates(StateGraph):
    new = State(timeout=30)
    done = State()

    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        return cls.done


class FanParent(StatorMixin, _Base):
    __tablename__ = "stator_bench_fan_parents"
    state_graph = FanParentStates
    id: Mapped[int] = mapped_column(primary_key=True)


class FanChild(StatorMixin, _Base):
    __tablename__ = "stator_bench_fan_children"
    state_graph = FanChildStates
    id: Mapped[int] = mapped_column(primary_key=True)
    parent_id: Mapped[int] = mapped_column(Integer)


class DeliveryStates(StateGraph):
    """One no-op delivery per row (the ``limits`` scenario's graph without a limit)."""

    send = State(timeout=30)
    done = State()

    send.transitions_to(done)

    @classmethod
    def check_send(cls, row: Any) -> State:
        return cls.done


DOMAIN_LIMIT = 2


class LimitedDeliveryStates(StateGraph):
    """The same delivery, at most ``DOMAIN_LIMIT`` at once per domain."""

    send = State(timeout=30, max_running=DOMAIN_LIMIT, limit_key="domain")
    done = State()

    send.transitions_to(done)

    @classmethod
    def check_send(cls, row: Any) -> State:
        return cls.done


class Delivery(StatorMixin, _Base):
    __tablename__ = "stator_bench_deliveries"
    state_graph = DeliveryStates
    stator_lease_column = "leased_until"
    id: Mapped[int] = mapped_column(primary_key=True)
    domain: Mapped[str] = mapped_column(String(50))
    leased_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class LimitedDelivery(StatorMixin, _Base):
    __tablename__ = "stator_bench_limited_deliveries"
    state_graph = LimitedDeliveryStates
    stator_lease_column = "leased_until"
    id: Mapped[int] = mapped_column(primary_key=True)
    domain: Mapped[str] = mapped_column(String(50))
    leased_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


MODELS: dict[str, type] = {
    "Delivery": Delivery,
    "LimitedDelivery": LimitedDelivery,
    "BenchRow": BenchRow,
    "BenchPlainRow": BenchPlainRow,
    "LatencyRow": LatencyRow,
    "FanParent": FanParent,
    "FanChild": FanChild,
}
