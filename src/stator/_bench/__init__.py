"""``stator bench``: Stator measured on a real database, against the database's own limit.

Scenarios (one module each): ``throughput`` (1, 2, 4… worker processes), ``limit`` (the same
claim and write-back SQL with no engine; the engine/limit ratio is the headline figure),
``latency`` (commit → handler start), ``scale`` (claim cost in tables of 10k to 10M rows),
``idle`` (what a worker with nothing to do costs), ``memory`` (RSS over a million
transitions), ``fanout`` (handlers that create child rows), ``limits`` (a graph with a
concurrency limit per key against the same graph without), ``django`` (the Django store
against the SQLAlchemy store on the same database).

Everything runs in throwaway places: SQLite files in a temporary folder, or on PostgreSQL
(``db``) a database per scenario, dropped afterwards.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ..errors import ConfigError
from . import (
    _django,
    _fanout,
    _idle,
    _latency,
    _limit,
    _limits,
    _memory,
    _scale,
    _throughput,
)
from ._child import BenchError
from ._common import Context, Result, Sizes
from ._models import BenchRow, BenchStates
from ._places import Server, temporary_folder

SCENARIOS: dict[str, Callable[[Context], list[Result]]] = {
    "throughput": _throughput.run,
    "limit": _limit.run,
    "latency": _latency.run,
    "scale": _scale.run,
    "idle": _idle.run,
    "memory": _memory.run,
    "fanout": _fanout.run,
    "limits": _limits.run,
    "django": _django.run,
}


def run_bench(
    db: str | None = None,
    scenarios: Sequence[str] = (),
    sizes: Sizes | None = None,
    *,
    concurrency: int = 4,
    batch_size: int = 100,
    progress: Callable[[str], None] = lambda _message: None,
    plain_rows: bool = False,
) -> Iterator[Result]:
    """Run the scenarios (all by default, in the order of ``SCENARIOS``), yielding each
    result as soon as it is measured.  ``db``: a PostgreSQL server URL, or None for SQLite.
    ``plain_rows``: throughput measures handlers given plain rows too, beside ORM rows."""
    chosen = _chosen(scenarios)
    with temporary_folder() as folder:
        server = Server(db, Path(folder))
        ctx = Context(server, sizes or Sizes(), concurrency, batch_size, progress,
                      plain_rows=plain_rows)
        with _monitor(ctx):
            for name in chosen:
                for line in SCENARIOS[name](ctx):
                    # How busy the machine was: figures taken while other work ran are low.
                    line["load_1m"] = round(os.getloadavg()[0], 2)
                    ctx.results.append(line)
                    yield line


def _chosen(scenarios: Sequence[str]) -> list[str]:
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise ConfigError(
            f"unknown scenario {', '.join(unknown)} (known: {', '.join(SCENARIOS)})"
        )
    return [s for s in SCENARIOS if not scenarios or s in scenarios]


@contextlib.contextmanager
def _monitor(ctx: Context) -> Iterator[None]:
    """On PostgreSQL, one autocommit connection to the server for statistics, kept for
    the whole run."""
    if ctx.server.admin_url is None:  # throwaway files: no server to watch
        yield
        return
    ctx.monitor = ctx.server.admin_engine()
    try:
        yield
    finally:
        ctx.monitor.dispose()


__all__ = [
    "SCENARIOS",
    "BenchError",
    "BenchRow",
    "BenchStates",
    "Result",
    "Sizes",
    "run_bench",
]
