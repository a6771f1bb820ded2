"""Measuring instruments: process CPU and memory, the PostgreSQL server's CPU, statement
counts, percentiles.

The server's CPU is read from ``/proc`` for the backends whose ``application_name`` is the
benchmark's (found in ``pg_stat_activity``), so it only works when the server runs on this
machine; elsewhere it is reported as unknown (``None``), never guessed.  Backends that end
during a measurement are caught by polling: the last value seen counts.
"""

from __future__ import annotations

import os
import resource
import statistics
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine, event, text

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
SHARED_PROCESSES = ("walwriter", "checkpointer", "background writer")
POLL = 0.2  # seconds between looks at the server's processes


def cpu_seconds() -> float:
    """User + system CPU of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mb() -> float:
    """This process's peak resident memory (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    """This process's resident memory now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of any process on this machine, or None if gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = data.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p95, p99, mean and max, in the values' unit."""
    if not values:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0, "mean": 0.0, "max": 0.0}
    if len(values) == 1:
        v = values[0]
        return {"p50": v, "p95": v, "p99": v, "mean": v, "max": v}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {
        "p50": cuts[49], "p95": cuts[94], "p99": cuts[98],
        "mean": statistics.fmean(values), "max": max(values),
    }


class StatementCounter:
    """Counts the statements SQLAlchemy sends through an engine (in this process)."""

    def __init__(self, engine: Engine) -> None:
        self.count = 0
        self._lock = threading.Lock()
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *_args: object) -> None:
        with self._lock:
            self.count += 1


@dataclass
class ServerCpu:
    """CPU used by the PostgreSQL server for the benchmark between ``start`` and ``stop``.

    ``backends``: the processes serving the benchmark's connections.  ``shared``: the WAL
    writer, checkpointer and background writer, which work for every database on the server
    (so other activity on it lands here too).
    """

    monitor: Engine
    app_name: str
    backends: float | None = None
    shared: float | None = None
    _base: dict[int, float] = field(default_factory=dict)
    _last: dict[int, float] = field(default_factory=dict)
    _shared_base: dict[int, float] = field(default_factory=dict)
    _shared_last: dict[int, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _local: bool = True

    def start(self) -> None:
        mine, shared = self._processes()
        self._local = any(process_cpu(pid) is not None for pid in mine + shared)
        self._base = {p: c for p in mine if (c := process_cpu(p)) is not None}
        self._shared_base = {p: c for p in shared if (c := process_cpu(p)) is not None}
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, name="bench-server-cpu", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Take a last look (while the measured processes still hold their connections)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        if not self._local:
            return
        self.backends = sum(c - self._base.get(p, 0.0) for p, c in self._last.items())
        self.shared = sum(
            c - self._shared_base.get(p, c) for p, c in self._shared_last.items()
        )

    def _poll(self) -> None:
        while not self._stop.wait(POLL):
            self._sample()

    def _sample(self) -> None:
        mine, shared = self._processes()
        for pid in mine:
            cpu = process_cpu(pid)
            if cpu is not None:
                self._last[pid] = cpu
        for pid in shared:
            cpu = process_cpu(pid)
            if cpu is not None:
                self._shared_last[pid] = cpu

    def _processes(self) -> tuple[list[int], list[int]]:
        with self.monitor.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT pid, application_name = :app FROM pg_stat_activity "
                    "WHERE application_name = :app OR backend_type = ANY(:shared)"
                ),
                {"app": self.app_name, "shared": list(SHARED_PROCESSES)},
            ).all()
        return [p for p, ours in rows if ours], [p for p, ours in rows if not ours]


@contextmanager
def server_cpu(monitor: Engine | None, app_name: str) -> Iterator[ServerCpu | None]:
    """A ``ServerCpu`` for PostgreSQL (``None`` for SQLite, where the database runs inside
    the worker and its CPU is the worker's)."""
    if monitor is None:
        yield None
        return
    meter = ServerCpu(monitor, app_name)
    try:
        yield meter
    finally:
        meter._stop.set()


def transactions(monitor: Engine, database: str) -> int:
    """Committed + rolled-back transactions of one database so far (``pg_stat_database``)."""
    with monitor.connect() as conn:
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        value = conn.execute(
            text(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = :db"
            ),
            {"db": database},
        ).scalar()
    return int(value or 0)


def per_thousand(seconds: float | None, transitions: int) -> float | None:
    """CPU seconds per 1,000 transitions."""
    if seconds is None or transitions <= 0:
        return None
    return round(seconds / transitions * 1000, 4)
