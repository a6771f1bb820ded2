"""Worker processes running the ``app_fixture`` graph (a -> b -> c -> done, one ledger row per
committed transition) while faults are injected, and the figures of what happened.

``Load`` inserts the rows, starts the workers and replaces any that die.  Faults: SIGKILL a
random worker (``kill_random``); workers that SIGKILL themselves at a random database commit,
just before or just after it (``self_kills``: mid-write by construction); a PostgreSQL
restart (``restart_database``, a throwaway cluster); SQLite's write lock held by another
process past the workers' busy timeout (``hold_sqlite_lock``).

After each fault it waits, bounded by the lease plus a slack, until the system has recovered:
after a worker died, until every handler it had in flight is due again (its lease ran out),
has started again elsewhere, or has been committed; after an outage, until commits resume.
That wait is the fault's *recovery time*.  It also notes, without waiting, how long until
every handler in flight at the fault has been committed again (*re-run time*): that one
includes waiting in line behind the rows that fell due before them.  ``finish`` waits for
every row to reach ``done``, stops the workers, and returns the ``Figures`` before the final
checks are made.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sqlite3
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select

from processes.app_fixture import STEPS
from processes.procs import (
    Proc,
    ProcApp,
    applied_twice,
    lost_writes,
    wait_until,
    worker_pids,
)

if TYPE_CHECKING:
    from .cluster import Cluster

# How much longer than the lease recovering from one fault may take before the test fails:
# the lease must run out, then a worker must reach the rows among the others that are due
# (in due order: behind every row that fell due before them).
RECOVERY_SLACK = 60.0
OUTAGE_LINE = re.compile(r"(worker|writer|wake-up listener): database (unavailable|reachable)")

Pair = tuple[int, str]


@dataclass
class Figures:
    """What one run went through, and what it lost (both must be 0)."""

    backend: str
    rows: int
    processes: int = 0
    kills: int = 0
    kills_in_flight: int = 0  # SIGKILLs that caught handlers running or results unwritten
    kills_mid_write: int = 0  # self-inflicted, just before or just after a commit
    db_restarts: int = 0
    lock_holds: int = 0
    rows_lost: int = 0  # rows not in their final state at the end
    applied_twice: int = 0  # (row, step) transitions committed more than once
    handler_reruns: int = 0  # handlers run again after a crash or lost lease (allowed)
    lost_writes: int = 0  # results refused by the fence (counted by the workers)
    longest_recovery: float = 0.0  # until a dead worker's rows were due again / commits resumed
    longest_rerun: float = 0.0  # until what was in flight at a fault was committed again
    lease: float = 0.0
    seconds: float = 0.0
    recoveries: list[tuple[str, float, float]] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"[{self.backend}] {self.rows} rows, {self.processes} worker processes, "
            f"{self.kills} SIGKILLs ({self.kills_in_flight} with handlers in flight, "
            f"{self.kills_mid_write} mid-write), {self.db_restarts} database restarts, "
            f"{self.lock_holds} lock holds; rows lost {self.rows_lost}, transitions applied "
            f"twice {self.applied_twice}; handler re-runs {self.handler_reruns}, fenced writes "
            f"refused {self.lost_writes}; longest recovery {self.longest_recovery:.1f}s "
            f"(lease {self.lease:g}s), longest re-run {self.longest_rerun:.1f}s; "
            f"{self.seconds:.0f}s"
        )

    def report(self) -> None:
        """Print the figures, and append them to ``$STATOR_TORTURE_REPORT`` if set."""
        print(f"\n{self.summary()}")
        path = os.environ.get("STATOR_TORTURE_REPORT")
        if path:
            with open(path, "a") as f:
                f.write(json.dumps(asdict(self)) + "\n")


@dataclass
class Recovery:
    cause: str
    since: float  # monotonic: when the fault ended (the kill, the database back up)
    pending: set[Pair]  # handlers in flight when it struck, to be committed by someone
    runs: Counter[Pair]  # how often each of them had started by then
    outage: int | None = None  # for an outage: the ledger count when it ended
    recovered: float | None = None  # seconds until due again / commits resumed
    rerun: float | None = None  # seconds until every pending handler was committed again


class Load:
    def __init__(
        self, app: ProcApp, rows: int, workers: int, *, concurrency: int = 4,
        sleep: float = 0.01, timeout: float = 1.0, self_kills: int = 0,
        die_after: str = "20-200", seed: int | None = None,
        recovery_slack: float = RECOVERY_SLACK, flaky: int = 0, overrun: int = 0,
    ) -> None:
        self.app = app
        self.rows = rows
        self.n_workers = workers
        self.concurrency = concurrency
        self.sleep = sleep
        self.timeout = timeout
        self.self_kills = self_kills
        self.die_after = die_after
        self.recovery_slack = recovery_slack
        self.flaky = flaky
        self.misbehaving = {"flaky": str(flaky), "overrun": str(overrun)}  # app_fixture's
        self.rng = random.Random(seed)
        self.workers: list[Proc] = []
        self.recoveries: list[Recovery] = []
        self.figures = Figures(app.backend, rows, lease=2 * timeout)
        self._armed = 0
        self._owed = 0  # replacements to start once the database is back
        self._checked = 0.0  # when recoveries were last checked (monotonic)
        self._began = time.monotonic()
        self.db_up = True

    @property
    def total(self) -> int:
        return self.rows * len(STEPS)

    # -- running -----------------------------------------------------------------------------

    def start(self) -> None:
        self.app.migrate()
        self.app.insert(self.rows)
        self._began = time.monotonic()
        for _ in range(self.n_workers):
            self._spawn()

    def _spawn(self) -> Proc:
        extra = dict(self.misbehaving)
        if self._armed < self.self_kills:
            self._armed += 1
            extra["die_after"] = self.die_after
        proc = self.app.spawn(
            "--concurrency", str(self.concurrency), sleep=self.sleep, timeout=self.timeout,
            **extra,
        )
        self.workers.append(proc)
        self.figures.processes += 1
        return proc

    def poll(self) -> None:
        """Replace workers that killed themselves (any other exit fails the test); note
        recoveries that have completed."""
        for proc in list(self.workers):
            code = proc.popen.poll()
            if code is None:
                continue
            self.workers.remove(proc)
            moment = self.app.self_kills().get(proc.pid)
            if code != -signal.SIGKILL or moment is None:
                pytest.fail(f"{proc.name} exited by itself (code {code})\n{proc.describe()}")
            self._killed(proc, f"{proc.name} killed itself {moment}")
            self.figures.kills_mid_write += 1
            if self.db_up:
                self._spawn()
            else:
                self._owed += 1  # a worker refuses to start without its database
        if self.db_up:
            self._check_recoveries()

    def progress(self) -> int:
        self.poll()
        return self.app.ledger_count()

    def wait_progress(self, fraction: float, timeout: float = 180.0) -> None:
        target = int(self.total * fraction)
        wait_until(lambda: self.progress() >= target,
                   f"{fraction:.0%} of the {self.total} steps to be committed",
                   timeout=timeout, app=self.app)

    # -- faults ------------------------------------------------------------------------------

    def kill_random(self) -> None:
        """SIGKILL a random running worker, start a replacement, wait (bounded) for its rows
        to be due again."""
        self.wait_running()
        victim = self.rng.choice(self.workers)
        victim.send(signal.SIGKILL)
        code = victim.wait(10)
        assert code == -signal.SIGKILL, victim.describe()
        self.workers.remove(victim)
        moment = self.app.self_kills().get(victim.pid)
        self._killed(victim, f"SIGKILL {victim.name}" + (f" {moment}" if moment else ""))
        self.figures.kills_mid_write += moment is not None
        self._spawn()
        self.settle()

    def _killed(self, proc: Proc, cause: str) -> None:
        self.figures.kills += 1
        pending = self._in_flight(proc.pid)
        if pending:
            self.figures.kills_in_flight += 1
            self.recoveries.append(
                Recovery(cause, time.monotonic(), pending, Counter(self.app.started()))
            )

    def restart_database(self, cluster: Cluster, mode: str, downtime: float) -> None:
        """Stop the (throwaway) PostgreSQL cluster under the running workers, keep it down for
        ``downtime`` seconds, start it again, and wait (bounded) for what was in flight."""
        self.wait_running()
        pending = self._in_flight()
        self.db_up = False
        cluster.stop(mode)
        end = time.monotonic() + downtime
        while time.monotonic() < end:
            self.poll()
            time.sleep(0.1)
        cluster.start()
        self.app.engine.dispose()  # the test's own pooled connections died with the server
        self.db_up = True
        for _ in range(self._owed):
            self._spawn()
        self._owed = 0
        self.figures.db_restarts += 1
        self._outage_ended(f"database restart ({mode}, {downtime:.1f}s down)", pending)

    def hold_sqlite_lock(self, seconds: float) -> None:
        """Hold SQLite's write lock from another process for ``seconds`` (longer than the
        workers' busy timeout, so their writes fail with "database is locked")."""
        path = self.app.engine.url.database
        assert path
        conn = sqlite3.connect(path, timeout=60, isolation_level=None)
        try:
            conn.execute("BEGIN EXCLUSIVE")
            pending = self._in_flight()
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                self.poll()
                time.sleep(0.1)
            conn.execute("ROLLBACK")
        finally:
            conn.close()
        self.figures.lock_holds += 1
        self._outage_ended(f"SQLite write lock held {seconds:g}s", pending)

    def _outage_ended(self, cause: str, pending: set[Pair]) -> None:
        self.recoveries.append(Recovery(
            cause, time.monotonic(), pending, Counter(self.app.started()),
            outage=self.app.ledger_count(),
        ))
        self.settle()

    def wait_running(self) -> None:
        """Wait until every worker is past its start-up checks (it has sent a heartbeat)."""
        def running() -> bool:
            self.poll()
            return {w.pid for w in self.workers} <= set(worker_pids(self.app))
        wait_until(running, "every worker to send its first heartbeat", timeout=60,
                   app=self.app)

    # -- recoveries --------------------------------------------------------------------------

    def _in_flight(self, pid: int | None = None) -> set[Pair]:
        """Handlers started (by ``pid``, or anyone) whose transitions are not committed."""
        started = {(row, step) for row, step, p in self.app.traced()
                   if pid in (None, p) and step in STEPS}  # not "fail", "wait", "overrun"
        return started - self._committed({row for row, _step in started})

    def _committed(self, rows: set[int]) -> set[Pair]:
        if not rows:
            return set()
        ledger = self.app.ledger_table
        found: set[Pair] = set()
        ordered = sorted(rows)
        with self.app.engine.connect() as conn:
            for at in range(0, len(ordered), 500):
                chunk = ordered[at:at + 500]
                found.update(
                    (int(r), str(s)) for r, s in conn.execute(
                        select(ledger.c.row_id, ledger.c.step).where(ledger.c.row_id.in_(chunk))
                    )
                )
        return found

    def _check_recoveries(self, every: float = 0.3) -> None:
        open_ = [r for r in self.recoveries if r.recovered is None or r.rerun is None]
        if not open_ or time.monotonic() - self._checked < every:
            return
        self._checked = time.monotonic()
        rows = {row for r in open_ for row, _step in r.pending}
        committed = self._committed(rows)
        waiting = [r for r in open_ if r.recovered is None and r.outage is None]
        held = self._held(rows) if waiting else set()
        runs = Counter(self.app.started()) if waiting else Counter()
        progress = self.app.ledger_count()
        now = time.monotonic()
        for r in open_:
            if r.rerun is None and r.pending <= committed:
                r.rerun = now - r.since
            if r.recovered is not None:
                continue
            if r.outage is not None:
                back = progress > r.outage or r.rerun is not None
            else:
                back = all(
                    pair in committed or pair not in held or runs[pair] > r.runs[pair]
                    for pair in r.pending
                )
            if back:
                r.recovered = now - r.since

    def _held(self, rows: set[int]) -> set[Pair]:
        """(row, state) of these rows while they are leased: not due before now."""
        jobs = self.app.jobs
        now = datetime.now(UTC)
        held: set[Pair] = set()
        with self.app.engine.connect() as conn:
            for row_id, state, due in conn.execute(
                select(jobs.c.id, jobs.c.state, jobs.c.state_next)
                .where(jobs.c.id.in_(sorted(rows)))
            ):
                if due is None or due > now:
                    held.add((int(row_id), str(state)))
        return held

    def settle(self) -> None:
        """Wait until every fault so far has been recovered from (a dead worker's rows due
        again, commits resumed after an outage): bounded by the lease plus the slack."""
        bound = self.figures.lease + self.recovery_slack

        def recovered() -> bool:
            self.poll()
            return all(r.recovered is not None for r in self.recoveries)

        if not recovered():
            late = [r for r in self.recoveries if r.recovered is None]
            wait_until(
                recovered,
                f"recovery from {', '.join(r.cause for r in late)} (lease "
                f"{self.figures.lease:g}s)", timeout=bound, app=self.app,
            )

    # -- the end -----------------------------------------------------------------------------

    def finish(self, timeout: float = 300.0) -> Figures:
        """Wait for every row to be done, stop the workers gracefully, return the figures."""
        wait_until(lambda: self.progress() >= self.total and self.app.done() == self.rows,
                   f"all {self.rows} rows to reach done", timeout=timeout, app=self.app)
        self.settle()
        self._check_recoveries(every=0)  # every row done: every re-run is committed
        self.wait_running()  # a worker still starting up would die of SIGTERM, not stop
        for proc in self.workers:
            proc.send(signal.SIGTERM)
        for proc in self.workers:
            code = proc.wait(60)
            if code == -signal.SIGKILL and proc.pid in self.app.self_kills():
                self.figures.kills += 1  # it reached its chosen commit while stopping
                self.figures.kills_mid_write += 1
                continue
            assert code == 0, proc.describe()
        self.workers = []
        figures = self.figures
        figures.seconds = time.monotonic() - self._began
        figures.rows_lost = self.rows - self.app.done()
        figures.applied_twice = len(applied_twice(self.app))
        runs = Counter(self.app.started())
        figures.handler_reruns = sum(n - 1 for n in runs.values())
        figures.lost_writes = lost_writes(self.app)
        figures.recoveries = [
            (r.cause, round(r.recovered or 0.0, 2), round(r.rerun or 0.0, 2))
            for r in self.recoveries
        ]
        figures.longest_recovery = max((r for _c, r, _s in figures.recoveries), default=0.0)
        figures.longest_rerun = max((s for _c, _r, s in figures.recoveries), default=0.0)
        return figures


def outage_lines(proc: Proc) -> Counter[tuple[str, str]]:
    """(activity, "unavailable" | "reachable") -> how many times the worker logged it."""
    return Counter(OUTAGE_LINE.findall(proc.stderr()))
