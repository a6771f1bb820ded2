"""What every scenario shares: the sizes to run at, the run's context, result records."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from .._stator import Stator
from ._models import BenchRow
from ._places import Place, Server, insert_rows, vacuum

Result = dict[str, Any]  # one JSON line: "scenario", "backend", then the scenario's figures


@dataclass(frozen=True)
class Sizes:
    """How big each scenario runs.  The defaults are the full run of the issue."""

    rows: int = 20_000  # throughput and limit: rows through the three-step graph
    repeats: int = 2  # throughput and limit: runs per measurement, the best one kept
    processes: tuple[int, ...] = (1, 2, 4)  # throughput: worker processes
    limit_batches: tuple[int, ...] = (100, 500)
    latency_samples: int = 200
    latency_gap: tuple[float, float] = (0.02, 0.05)  # seconds between commits: light load
    scale_sizes: tuple[int, ...] = (10_000, 1_000_000, 10_000_000)
    scale_due: int = 10_000  # rows due at each size; the rest are finished (terminal)
    idle_seconds: float = 60.0
    memory_transitions: int = 1_000_000
    memory_sample_every: float = 0.5
    fanout_parents: int = 2_000
    fanout_children: int = 10  # K: child rows each parent's handler creates
    limits_due: tuple[int, ...] = (20_000, 1_000_000)  # limits: due rows a claim is timed in

    @classmethod
    def quick(cls) -> Sizes:
        """Minutes, not a quarter of an hour: for CI and a first look."""
        return cls(
            rows=2_000, repeats=1, processes=(1, 2), latency_samples=30,
            scale_sizes=(10_000, 100_000), scale_due=2_000, idle_seconds=5.0,
            memory_transitions=30_000, memory_sample_every=0.1, fanout_parents=200,
            limits_due=(2_000, 100_000),
        )

    @classmethod
    def tiny(cls) -> Sizes:
        """Seconds: enough to check that every scenario works (the test suite)."""
        return cls(
            rows=200, repeats=1, processes=(1,), limit_batches=(100,), latency_samples=5,
            latency_gap=(0.005, 0.01), scale_sizes=(1_000, 3_000), scale_due=200,
            idle_seconds=1.0, memory_transitions=600, memory_sample_every=0.05,
            fanout_parents=20, fanout_children=3, limits_due=(1_000,),
        )

    def with_rows(self, rows: int | None) -> Sizes:
        return self if rows is None else replace(self, rows=rows)

    def with_processes(self, processes: tuple[int, ...] | None) -> Sizes:
        return self if not processes else replace(self, processes=processes)


@dataclass
class Context:
    """One ``stator bench`` run: where, how big, and what was measured so far."""

    server: Server
    sizes: Sizes
    concurrency: int = 4
    batch_size: int = 100
    progress: Callable[[str], None] = lambda _message: None
    results: list[Result] = field(default_factory=list)
    monitor: Engine | None = None  # PostgreSQL: the server's own database, autocommit
    plain_rows: bool = False  # throughput: plain rows measured too, beside ORM rows

    @property
    def backend(self) -> str:
        return self.server.backend

    @property
    def folder(self) -> Path:
        return self.server.folder

    def earlier(self, scenario: str, **match: Any) -> Result | None:
        """A result this run already produced, if any (the limit scenario's ratio needs the
        engine's throughput from the same run)."""
        for result in self.results:
            if result["scenario"] == scenario and all(result.get(k) == v for k, v in match.items()):
                return result
        return None


def best(runs: int, measure: Callable[[], Result], key: str) -> Result:
    """The best of ``runs`` measurements by ``key``: on a machine other work shares, the
    best run is the one least disturbed, the closest to what the code itself costs."""
    return best_of([measure() for _ in range(max(runs, 1))], key)


def best_of(found: list[Result], key: str) -> Result:
    """The best of measurements already made (see ``best``)."""
    chosen = max(found, key=lambda line: line[key])
    chosen["runs"] = len(found)
    return chosen


def result(scenario: str, backend: str, **figures: Any) -> Result:
    """A result record, floats rounded for reading."""
    return {"scenario": scenario, "backend": backend,
            **{k: _rounded(v) for k, v in figures.items()}}


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4 if abs(value) < 10 else 1)
    return value


@contextmanager
def bench_rows(place: Place, rows: int, model: Any = BenchRow) -> Iterator[Stator]:
    """A migrated Stator for ``model`` (``BenchRow``: the three steps) holding ``rows`` rows,
    all due in the first state."""
    stator = Stator(place.url, [model])
    try:
        stator.migrate()
        insert_rows(stator.engine, model.__tablename__, 1, rows)
        # PostgreSQL: planner statistics, as autovacuum leaves them in a live system and as
        # the minimal loop's table has them (VACUUM ANALYZE).  Without any, the planner guessed
        # at the table and found each written-back row by the claim index's (state, lease),
        # which all of a claim's rows share, instead of by its primary key: about 10% more
        # database CPU per transition.  SQLite: nothing (``vacuum``).
        vacuum(stator.engine, model.__tablename__)
        yield stator
    finally:
        stator.dispose()
