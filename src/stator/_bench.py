"""``stator bench``: how many transitions a worker gets through, measured on a real database.

Throughput scenario: N rows through a three-step graph of no-op handlers (3 transitions per
row), one in-process worker run until idle.  SQLite uses a throwaway file; PostgreSQL
(``--db``) a throwaway schema, dropped afterwards.
"""

from __future__ import annotations

import resource
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ._graph import State, StateGraph
from ._stator import Stator
from .sqlalchemy import StatorMixin


class _Base(DeclarativeBase):
    pass


class BenchStates(StateGraph):
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


@dataclass
class ThroughputResult:
    scenario: str
    backend: str
    rows: int
    transitions: int
    concurrency: int
    batch_size: int
    seconds: float
    transitions_per_second: float
    cpu_seconds_per_1000: float
    peak_rss_mb: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextmanager
def bench_database(db: str | None) -> Iterator[str]:
    """A URL for a throwaway place to benchmark in, removed afterwards."""
    if db is None:
        with tempfile.TemporaryDirectory(prefix="stator-bench-") as folder:
            yield f"sqlite:///{Path(folder) / 'bench.db'}"
        return
    url = make_url(db)
    if url.get_backend_name() != "postgresql":
        yield db
        return
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    schema = f"stator_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        scoped = url.update_query_dict({"options": f"-csearch_path={schema}"})
        yield scoped.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def throughput(db: str | None, rows: int, concurrency: int, batch_size: int) -> ThroughputResult:
    with bench_database(db) as url:
        stator = Stator(url, models=[BenchRow], concurrency=concurrency, batch_size=batch_size)
        try:
            stator.migrate()
            with stator.engine.begin() as conn:
                for start in range(0, rows, 5000):
                    conn.execute(insert(BenchRow), [{} for _ in range(min(5000, rows - start))])
            cpu_before = _cpu()
            began = time.perf_counter()
            summary = stator.run(until_idle=True, idle_window=0.0)
            seconds = time.perf_counter() - began
            cpu = _cpu() - cpu_before
        finally:
            stator.dispose()
    transitions = summary.transitions
    return ThroughputResult(
        scenario="throughput", backend=stator.engine.dialect.name, rows=rows,
        transitions=transitions, concurrency=concurrency, batch_size=batch_size,
        seconds=round(seconds, 3),
        transitions_per_second=round(transitions / seconds, 1) if seconds else 0.0,
        cpu_seconds_per_1000=round(cpu / max(transitions, 1) * 1000, 4),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    )


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
