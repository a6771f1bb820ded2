"""Handlers that misbehave, in real worker processes: they raise, end their thread, hang past
the deadline (sync and async, more of them than there are handler slots), return a state the
graph does not allow from there, a state it does not have, or garbage, and exhaust
``max_attempts``.  The workers stay up and keep moving the well-behaved rows; every failure
is recorded with its message and a traceback and shown by ``stator status``; each bad row
ends in ``failed`` after exactly ``max_attempts`` recorded failures.
"""

from __future__ import annotations

import json
import signal
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from processes.procs import ProcApp, wait_until
from stator import ManualClock, State, StateGraph

from . import chaos_app
from .chaos_app import ATTEMPTS, FAILS

pytestmark = pytest.mark.slow

OK_ROWS = 1000
FLAKY_ROWS = 5
CONCURRENCY = 4
WORKERS = 2
TIMEOUT = 2.0  # each handler's deadline; the lease is twice it
# More hanging handlers of each kind than the workers have handler slots, and as many
# handlers that end their thread.
BAD_ROWS = {kind: 3 for kind in FAILS} | {"hang_sync": 10, "hang_async": 10, "exit": 8}
STEPS = ("a", "b", "c")
# The function each failure's traceback must point into.
HANDLER = {"a": "check_a", "b": "check_b", "c": "check_c"}


@pytest.fixture
def chaos(proc_db_url: str, tmp_path: Path) -> Iterator[ProcApp]:
    app = ProcApp(proc_db_url, tmp_path, app=chaos_app)
    try:
        yield app
    finally:
        app.close()


def test_misbehaving_handlers_fail_visibly_and_the_rest_keeps_flowing(chaos: ProcApp) -> None:
    chaos.migrate()
    kinds: dict[int, str] = {}
    next_id = 1
    # The misbehaving rows are due first, so their handlers take every slot to begin with.
    for kind, count in BAD_ROWS.items():
        chaos.insert(count, start=next_id, kind=kind)
        kinds.update({i: kind for i in range(next_id, next_id + count)})
        next_id += count
    chaos.insert(FLAKY_ROWS, start=next_id, kind="flaky")
    kinds.update({i: "flaky" for i in range(next_id, next_id + FLAKY_ROWS)})
    next_id += FLAKY_ROWS
    chaos.insert(OK_ROWS, start=next_id, kind="ok")
    kinds.update({i: "ok" for i in range(next_id, next_id + OK_ROWS)})
    bad = sum(BAD_ROWS.values())

    # Room for every hung thread this run makes (20 rows hang, each attempt a thread): here
    # the workers are to stay up and keep the rest flowing. With the default cap they would
    # exit 75 to be restarted instead: tests/test_hung_bounds.py covers that.
    workers = [
        chaos.spawn("--concurrency", str(CONCURRENCY), "--max-hung", "256", timeout=TIMEOUT)
        for _ in range(WORKERS)
    ]
    wait_until(
        lambda: chaos.states() == {"done": OK_ROWS + FLAKY_ROWS, "failed": bad},
        "every row to end in done or failed", timeout=180, watch=workers, app=chaos,
    )

    # `stator status` while the workers still run: the failed rows, the failures with their
    # messages and tracebacks, and both workers alive.
    result = chaos.cli("status", chaos.app_ref, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    states = {s["state"]: s for s in report["models"][0]["states"]}
    assert (states["failed"]["role"], states["failed"]["rows"]) == ("exhausted", bad)
    assert states["done"]["rows"] == OK_ROWS + FLAKY_ROWS
    alive = {w["pid"] for w in report["workers"] if w["alive"]}
    assert alive == {w.pid for w in workers}, report["workers"]
    assert report["errors"], report
    for error in report["errors"]:
        assert error["message"] and error["traceback"], error
    shown = chaos.cli("status", chaos.app_ref)
    assert shown.returncode == 0, shown.stderr
    assert "recent errors:" in shown.stdout
    assert "failed" in shown.stdout and "exhausted" in shown.stdout

    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(60) == 0, worker.describe()

    # Every failure was recorded once per attempt, with its message and a traceback into
    # the handler; good rows recorded none.
    with chaos.engine.connect() as conn:
        errors = conn.execute(text(
            "SELECT row_pk, state, attempt, kind, message, traceback FROM stator_errors"
        )).all()
    by_row: dict[int, list[tuple[str, int, str, str, str]]] = defaultdict(list)
    for row_pk, state, attempt, kind, message, trace in errors:
        by_row[int(row_pk)].append((state, attempt, kind, message, trace))
    for row_id, kind in kinds.items():
        recorded = sorted(by_row.get(row_id, []))
        if kind == "ok":
            assert recorded == [], (row_id, recorded)
            continue
        if kind == "flaky":
            assert [(s, a, k) for s, a, k, _m, _t in recorded] == [
                ("a", n, "error") for n in range(1, ATTEMPTS)
            ], (row_id, recorded)
            continue
        state, failure, fragment = FAILS[kind]
        assert [(s, a, k) for s, a, k, _m, _t in recorded] == [
            (state, n, failure) for n in range(1, ATTEMPTS + 1)
        ], (row_id, kind, recorded)
        for _s, _a, _k, message, trace in recorded:
            assert fragment.format(id=row_id) in message, (row_id, kind, message)
            assert HANDLER[state] in trace, (row_id, kind, message, trace)

    # Exactly the steps before the failing one were committed, each once; and each handler
    # ran exactly once per attempt: the misbehaving ones never stalled a worker long enough
    # for a lease to run out and a row to be run again.
    ledger = Counter((row_id, step) for row_id, step, _pid in chaos.ledger())
    assert max(ledger.values()) == 1
    # (A hanging handler may legitimately run once more: queued behind the other hanging
    # ones, it can start late enough that its lease runs out as its deadline passes.)
    runs = Counter(chaos.started())
    for row_id, kind in kinds.items():
        stop = FAILS[kind][0] if kind in FAILS else None
        for step in STEPS[:STEPS.index(stop) + 1] if stop else STEPS:
            expected = ATTEMPTS if step == stop or (kind, step) == ("flaky", "a") else 1
            ran = runs[(row_id, step)]
            if kind.startswith("hang") and step == stop:
                assert ran >= expected, (row_id, kind, step, ran)
            else:
                assert ran == expected, (row_id, kind, step, ran)
    for row_id, kind in kinds.items():
        stop = FAILS[kind][0] if kind in FAILS else None
        expected = set(STEPS[:STEPS.index(stop)] if stop else STEPS)
        assert {step for (r, step) in ledger if r == row_id} == expected, (row_id, kind)
    rows = {row.id: row for row in chaos.rows()}
    assert all(
        rows[i].state == ("done" if kind in ("ok", "flaky") else "failed")
        for i, kind in kinds.items()
    )
    assert all(row.state_next is None for row in rows.values())

    # The workers said what happened to their handlers, and went on.
    logs = "".join(w.stderr() for w in workers)
    assert f"passed its {TIMEOUT:g}s deadline; abandoned" in logs
    assert "handler thread" in logs and "died" in logs


class FailsLate(StateGraph):
    new = State(retry_after=10)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, order: Any) -> State:
        raise RuntimeError("still failing")


def test_a_failure_long_after_the_row_entered_its_state_stays_visible(
    backend: str, clock: ManualClock, make_stator: Any, build_models: Any
) -> None:
    """A failure is recorded at the time it happened, not when its row entered its state: a
    row failing for days must not have its new failures pruned as a day old at once."""
    models = build_models(FailsLate)
    stator = make_stator(backend, [models.Order], clock)
    with Session(stator.engine) as session:
        session.add(models.Order(id=1))
        session.commit()
    clock.advance(3 * 24 * 3600)

    with pytest.raises(RuntimeError, match="still failing"):
        stator.run_once()
    stator.store.record_stats([], clock.now() - timedelta(days=1))  # what workers prune

    (error,) = stator.status()["errors"]
    assert datetime.fromisoformat(error["created_at"]) == clock.now()
