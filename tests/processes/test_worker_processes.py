"""Real ``stator run`` processes against a real database (SQLite file or PostgreSQL schema).

The application (``app_fixture.py``) moves each row a -> b -> c -> done; every handler adds
one ledger row in the row's own session, so the ledger holds exactly one row per committed
transition.  Conditions are awaited by polling the database with bounded waits; nothing
here asserts that anything was fast.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from .app_fixture import AUTOMATIC, STEPS
from .procs import assert_exactly_once, error_count, lost_writes, wait_until, worker_pids

if TYPE_CHECKING:
    from .procs import ProcApp

pytestmark = pytest.mark.slow

APP = "app_fixture:stator"


# -- running to completion --------------------------------------------------------------------


def test_until_idle_runs_every_row_to_done_and_exits(proc_app: ProcApp) -> None:
    proc_app.migrate()
    proc_app.insert(300)

    worker = proc_app.spawn("--until-idle")

    assert worker.wait(120) == 0, worker.describe()
    assert proc_app.states() == {"done": 300}
    assert_exactly_once(proc_app, 300)
    assert error_count(proc_app) == 0
    assert "stopped (idle)" in worker.stderr(), worker.describe()
    assert worker_pids(proc_app) == []  # a worker that stops removes its heartbeat row


def test_three_workers_share_one_database(proc_app: ProcApp) -> None:
    rows = 1000
    proc_app.migrate()
    proc_app.insert(rows)

    workers = [proc_app.spawn("--until-idle", sleep=0.002) for _ in range(3)]

    for worker in workers:
        assert worker.wait(150) == 0, worker.describe()
    assert proc_app.states() == {"done": rows}
    assert_exactly_once(proc_app, rows)
    by_pid = Counter(pid for _row, _step, pid in proc_app.ledger())
    assert set(by_pid) <= {w.pid for w in workers}
    print(f"\n[{proc_app.backend}] steps per worker process: {dict(by_pid)}")
    if proc_app.backend == "postgresql":
        assert len(by_pid) > 1, f"only one worker process did any work: {dict(by_pid)}"


# -- stopping ---------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_graceful_stop_finishes_running_handlers_and_hands_back_the_rest(
    proc_app: ProcApp, signum: signal.Signals
) -> None:
    rows = 20  # 60 three-second steps on two threads: far more than run before the signal
    proc_app.migrate()
    proc_app.insert(rows)
    worker = proc_app.spawn("--concurrency", "2", sleep=3.0, timeout=10.0)  # lease: 20 s

    wait_until(lambda: len(proc_app.started()) >= 2, "two handlers to be running",
               watch=[worker], app=proc_app)
    worker.send(signum)

    assert worker.wait(60) == 0, worker.describe()
    exited = datetime.now(UTC)
    stderr = worker.stderr()
    assert f"received {signum.name}" in stderr, worker.describe()
    assert "forced exit" not in stderr

    # Every handler that started ran to the end and its transition was committed.
    started = set(proc_app.started())
    committed = {(row_id, step) for row_id, step, _pid in proc_app.ledger()}
    assert len(started) >= 2
    assert started == committed, (
        f"started but not committed: {sorted(started - committed)}; "
        f"committed but never started: {sorted(committed - started)}"
    )
    assert error_count(proc_app) == 0

    # Rows claimed but not started were handed back: every row still in an automatic state
    # is due again at once instead of waiting out the 20 s lease.
    remaining = [r for r in proc_app.rows() if r.state in AUTOMATIC]
    assert any(r.state == "a" for r in remaining), "expected unstarted rows to be left"
    held = [
        (r.id, r.state, r.state_next) for r in remaining
        if r.state_next is None or r.state_next > exited + timedelta(seconds=3)
    ]
    assert not held, f"{len(held)} rows still leased after a graceful stop at {exited}: {held[:5]}"
    assert all(r.state_attempts == 0 for r in remaining)
    assert worker.pid not in worker_pids(proc_app)


def test_second_sigint_exits_at_once(proc_app: ProcApp) -> None:
    proc_app.migrate()
    proc_app.insert(4)
    worker = proc_app.spawn("--concurrency", "2", sleep=30.0, timeout=60.0)

    wait_until(lambda: len(proc_app.started()) >= 2, "two handlers to be running",
               watch=[worker], app=proc_app)
    worker.send(signal.SIGINT)
    wait_until(lambda: "received SIGINT" in worker.stderr(), "the first SIGINT to be handled",
               timeout=10, watch=[worker])
    assert worker.alive(), "a single SIGINT must wait for the running handlers"
    worker.send(signal.SIGINT)

    # Bounded well below the 30 s the running handlers still need.
    assert worker.wait(10) == 130, worker.describe()
    assert "forced exit" in worker.stderr()
    assert proc_app.ledger_count() == 0  # nothing half-done was committed
    assert proc_app.states() == {"a": 4}


# -- crashes ----------------------------------------------------------------------------------


def test_sigkilled_workers_are_recovered_from_without_repeating_a_step(
    proc_app: ProcApp, rng: random.Random,
) -> None:
    rows = 200
    total = rows * len(STEPS)
    options: dict[str, Any] = {"sleep": 0.1, "timeout": 1.0}  # lease: 2 s
    proc_app.migrate()
    proc_app.insert(rows)
    workers = [proc_app.spawn("--concurrency", "4", **options) for _ in range(2)]
    kills: list[float] = []

    for fraction in (0.2, 0.5):
        wait_until(lambda f=fraction: proc_app.ledger_count() >= f * total,
                   f"{fraction:.0%} of the steps to be committed", timeout=90,
                   watch=workers, app=proc_app)
        time.sleep(rng.uniform(0.0, 0.5))
        victim = rng.choice(workers)
        victim.send(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        kills.append(time.monotonic())
        done_at_kill = proc_app.ledger_count()
        print(f"\n[{proc_app.backend}] SIGKILL {victim.name} at {done_at_kill}/{total} steps")
        workers.remove(victim)
        workers.append(proc_app.spawn("--concurrency", "4", **options))

    wait_until(lambda: proc_app.done() == rows, f"all {rows} rows to reach done",
               timeout=120, watch=workers, app=proc_app)
    finished = time.monotonic()
    print(
        f"[{proc_app.backend}] recovery: all rows done {finished - kills[-1]:.1f}s after the "
        f"last SIGKILL, {finished - kills[0]:.1f}s after the first"
    )

    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(30) == 0, worker.describe()
    assert_exactly_once(proc_app, rows)
    handler_runs = Counter(proc_app.started())
    reruns = sum(n - 1 for n in handler_runs.values())
    print(f"[{proc_app.backend}] handlers run again after a crash or lost lease: {reruns}")


def test_a_paused_worker_cannot_commit_after_its_lease_was_taken_over(
    proc_app: ProcApp,
) -> None:
    """SIGSTOP a worker (a GC pause, a frozen VM) until another worker has re-run one of the
    handlers it was running, then SIGCONT it: its late results must be refused by the fence."""
    rows = 60
    options: dict[str, Any] = {"sleep": 0.3, "timeout": 1.0}  # lease: 2 s
    proc_app.migrate()
    proc_app.insert(rows)
    paused, other = (proc_app.spawn("--concurrency", "4", **options) for _ in range(2))

    def committed() -> dict[tuple[int, str], int]:
        return {(row_id, step): pid for row_id, step, pid in proc_app.ledger()}

    wait_until(lambda: proc_app.ledger_count() >= 20, "20 steps to be committed",
               timeout=60, watch=[paused, other], app=proc_app)
    taken_over: list[tuple[int, str]] = []
    for _attempt in range(10):
        paused.send(signal.SIGSTOP)
        in_flight = {
            (row_id, step) for row_id, step, pid in proc_app.traced() if pid == paused.pid
        } - set(committed())
        if not in_flight:  # caught between batches: let it run on a little and try again
            paused.send(signal.SIGCONT)
            time.sleep(0.3)
            continue
        # Usually a few seconds (the 2 s lease, then one handler).  If the pause caught the
        # worker holding SQLite's write lock nothing can commit: let it go on and retry.
        deadline = time.monotonic() + 8.0
        while time.monotonic() < deadline and not taken_over:
            taken_over = sorted(in_flight & set(committed()))
            time.sleep(0.1)
        paused.send(signal.SIGCONT)
        if taken_over:
            break
        time.sleep(1.0)
    assert taken_over, f"no handler of the paused worker was taken over\n{proc_app.describe()}"
    assert all(committed()[pair] == other.pid for pair in taken_over)

    wait_until(lambda: proc_app.done() == rows, f"all {rows} rows to reach done",
               timeout=90, watch=[paused, other], app=proc_app)
    for worker in (paused, other):
        worker.send(signal.SIGTERM)
    for worker in (paused, other):
        assert worker.wait(30) == 0, worker.describe()
    assert_exactly_once(proc_app, rows)
    refused = lost_writes(proc_app, paused.pid)
    print(f"\n[{proc_app.backend}] taken over while paused: {taken_over}; "
          f"late writes refused: {refused}")
    assert refused >= 1, "the paused worker's stale writes should be counted as lost"


# -- observability ----------------------------------------------------------------------------


def test_status_lists_a_running_worker_until_it_stops(proc_app: ProcApp) -> None:
    proc_app.migrate()
    worker = proc_app.spawn()
    wait_until(lambda: worker.pid in worker_pids(proc_app), "the worker's first heartbeat",
               watch=[worker], app=proc_app)

    result = proc_app.cli("status", APP, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    mine = [w for w in report["workers"] if w["pid"] == worker.pid]
    assert len(mine) == 1, report["workers"]
    assert mine[0]["alive"] is True
    assert mine[0]["models"] == "proc_jobs"

    worker.send(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.describe()
    result = proc_app.cli("status", APP, "--json")
    assert result.returncode == 0, result.stderr
    assert [w for w in json.loads(result.stdout)["workers"] if w["pid"] == worker.pid] == []


def test_liveness_file_is_created_and_touched(proc_app: ProcApp) -> None:
    proc_app.migrate()
    live = proc_app.dir / "alive"
    worker = proc_app.spawn("--liveness-file", str(live))

    wait_until(live.exists, "the liveness file to be created", timeout=30, watch=[worker],
               app=proc_app)
    long_ago = time.time() - 3600
    os.utime(live, (long_ago, long_ago))
    wait_until(lambda: live.stat().st_mtime > long_ago + 600,
               "the liveness file to be touched again", timeout=30, watch=[worker], app=proc_app)

    worker.send(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.describe()


# -- mistakes ---------------------------------------------------------------------------------

BAD_INPUT = {
    "module-missing": (("run", "nosuch_module:stator"), "nosuch_module"),
    "attribute-missing": (("run", "app_fixture:nosuch"), "nosuch"),
    "not-migrated": (("run", APP), "stator migrate"),
    "run-for-zero": (("run", APP, "--run-for", "0"), "--run-for"),
    "unknown-model": (("run", APP, "--models", "nosuch"), "nosuch"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_exits_2_with_one_error_line(proc_app: ProcApp, case: str) -> None:
    args, mentions = BAD_INPUT[case]
    if case != "not-migrated":
        proc_app.migrate()

    result = proc_app.cli(*args)

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.lower().startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert mentions in errors[0], result.stderr
    if case != "run-for-zero":  # click's own usage errors add "Usage:" lines around theirs
        assert result.stderr.strip().splitlines() == errors, result.stderr
