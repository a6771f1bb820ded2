"""Application code racing the workers: ``transition_perform`` on a row whose handler is
running in a worker process right now.

Exactly one of the two transitions happens, never a mix: either the application's move to
``cancelled`` (then the handler's transition and its ledger row are not committed, and the
worker counts its refused write as *lost*), or the worker's (then the application gets
``TransitionConflict``).  Every row ends in ``done`` or ``cancelled`` and its history and
ledger agree, step by step.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter, defaultdict

import pytest
from sqlalchemy.orm import Session

from processes.app_fixture import Job, JobGraph
from processes.procs import ProcApp, lost_writes
from stator import TransitionConflict

pytestmark = pytest.mark.slow

ROWS = 1000
SLEEP = 0.02  # each handler's run time: the window the application races into


def race(app: ProcApp, rng: random.Random, row_id: int, step: str) -> str | None:
    """Try to cancel a row whose handler for ``step`` was seen running.  "won", "lost"
    (TransitionConflict), or None if the row had already moved on before we looked."""
    with Session(app.engine) as session:
        job = session.get(Job, row_id)
        assert job is not None
        if job.state != step:
            return None
        if rng.random() < 0.5:
            time.sleep(rng.uniform(0, 2 * SLEEP))  # let the handler's commit come first
        try:
            job.transition_perform(JobGraph.cancelled)
            session.commit()
        except TransitionConflict:
            session.rollback()
            return "lost"
    return "won"


def test_transition_perform_racing_a_running_handler_is_one_or_the_other(
    proc_app: ProcApp, rng: random.Random,
) -> None:
    proc_app.migrate()
    proc_app.insert(ROWS)
    workers = [
        proc_app.spawn("--concurrency", "4", sleep=SLEEP, timeout=10.0) for _ in range(2)
    ]
    outcomes: dict[tuple[int, str], str] = {}
    deadline = time.monotonic() + 120

    def final() -> int:
        states = proc_app.states()
        return states["done"] + states["cancelled"]

    while final() < ROWS:
        assert time.monotonic() < deadline, "the rows did not all finish\n" + proc_app.describe()
        for worker in workers:
            assert worker.alive(), worker.describe()
        committed = {(r, s) for r, s, _pid in proc_app.ledger()}
        running = [p for p in set(proc_app.started()) - committed if p not in outcomes]
        if not running or len(outcomes) >= 150:
            time.sleep(0.05)
            continue
        pair = rng.choice(running)
        outcome = race(proc_app, rng, *pair)
        if outcome is not None:
            outcomes[pair] = outcome

    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(30) == 0, worker.describe()

    won = [pair for pair, o in outcomes.items() if o == "won"]
    lost = [pair for pair, o in outcomes.items() if o == "lost"]
    refused = lost_writes(proc_app)
    print(f"\n[{proc_app.backend}] races: application won {len(won)}, lost {len(lost)} "
          f"(TransitionConflict); worker writes refused: {refused}")
    assert won and lost, f"the races did not go both ways: {Counter(outcomes.values())}"

    # Every row's history and ledger agree: each worker transition committed its ledger row
    # once; the application's cancel, if any, came last and committed no ledger row.
    ledger: dict[int, list[str]] = defaultdict(list)
    for row_id, step, _pid in proc_app.ledger():
        ledger[row_id].append(step)
    for row in proc_app.rows():
        moves = [entry[0] for entry in row.state_history or []]
        visited = ["a", *moves]
        assert row.state == moves[-1] and row.state in ("done", "cancelled"), (row.id, moves)
        assert "cancelled" not in moves[:-1], (row.id, moves)
        worker_steps = [visited[i] for i, to in enumerate(moves) if to != "cancelled"]
        assert sorted(ledger[row.id]) == sorted(worker_steps), (row.id, moves, ledger[row.id])
    rows = {row.id: row for row in proc_app.rows()}
    for row_id, step in won:
        moves = [entry[0] for entry in rows[row_id].state_history]
        assert moves[-1] == "cancelled" and ["a", *moves][-2] == step, (row_id, step, moves)
        assert step not in ledger[row_id], (row_id, step, ledger[row_id])
    for row_id, step in lost:
        assert step in ledger[row_id], (row_id, step, ledger[row_id])

    # The worker side reported its losses: each handler the application beat had its write
    # refused by the fence and counted as lost, and `stator status` shows them.
    assert refused >= len(won), (refused, len(won))
    report = json.loads(proc_app.cli("status", proc_app.app_ref, "--json").stdout)
    assert report["models"][0]["recent"]["lost"] == refused
