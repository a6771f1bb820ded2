"""The demo end to end: a real worker fans posts out and delivers them to a flaky remote.

Small numbers and a near-zero simulated latency keep each run to a few seconds (the worker
still waits out its one-second idle window).  Nothing here asserts on timing.
"""

import io
import logging
from pathlib import Path

import pytest
from rich.console import Console
from sqlalchemy import Connection, create_engine, func, select

from stator._demo import (
    MAX_ATTEMPTS,
    DemoSummary,
    Inbox,
    InboxStates,
    Post,
    _live,
    _remote,
    run_demo,
)

SETTLED = {InboxStates.delivered.name, InboxStates.undeliverable.name}


def _run(
    tmp_path: Path, *, posts: int = 3, followers: int = 4, failure_rate: float = 0.0,
    latency: float = 0.001,
) -> tuple[DemoSummary, str]:
    out = io.StringIO()
    summary = run_demo(
        tmp_path / "demo.db", posts=posts, followers=followers, failure_rate=failure_rate,
        concurrency=2, console=Console(file=out, width=100), seed=7, latency=latency,
    )
    return summary, out.getvalue()


def _states(path: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Rows per state read straight from the file, not trusting the summary."""
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            return _count(conn, Post), _count(conn, Inbox)
    finally:
        engine.dispose()


def _count(conn: Connection, model: type[Post] | type[Inbox]) -> dict[str, int]:
    query = select(model.state, func.count()).group_by(model.state)
    return {state: int(rows) for state, rows in conn.execute(query)}


def test_it_says_where_it_left_its_file_and_what_next(tmp_path: Path) -> None:
    _summary, output = _run(tmp_path, posts=1, followers=1)
    flat = " ".join(output.split())  # the console wraps long lines
    assert f"The rows are in {tmp_path / 'demo.db'}" in flat
    assert "What next: stator demo --failure-rate 0.6" in flat and "docs/tutorial.md" in flat


def test_a_reliable_remote_delivers_everything(tmp_path: Path) -> None:
    summary, output = _run(tmp_path)
    assert summary.inbox_rows == 12
    assert summary.delivered == 12
    assert summary.undeliverable == summary.pending == 0
    assert summary.posts_done == 3
    assert summary.failed_attempts == summary.throttled == 0
    assert summary.transitions == 3 * 2 + 12  # new->fanned_out->done per post, one per inbox
    assert not summary.interrupted
    assert _states(tmp_path / "demo.db") == ({"done": 3}, {"delivered": 12})
    assert "Demo finished" in output


def test_a_flaky_remote_ends_every_row_delivered_or_undeliverable(tmp_path: Path) -> None:
    summary, _ = _run(tmp_path, posts=3, followers=6, failure_rate=0.5)
    posts, inbox = _states(tmp_path / "demo.db")
    assert posts == {"done": 3}
    assert set(inbox) <= SETTLED
    assert sum(inbox.values()) == summary.inbox_rows == 18
    assert summary.delivered + summary.undeliverable == 18
    assert summary.failed_attempts > 0  # with this seed the remote does fail
    assert summary.remote_calls >= 18 + summary.failed_attempts


def test_a_dead_remote_exhausts_every_row(tmp_path: Path) -> None:
    summary, output = _run(tmp_path, posts=2, followers=3, failure_rate=1.0)
    assert summary.undeliverable == 6
    assert summary.delivered == summary.pending == 0
    # A throttle (TryAgainLater) is not a failure and starts the streak over, so rows
    # may fail more than MAX_ATTEMPTS times in all; the engine saw every failure raised.
    assert summary.failed_attempts >= 6 * MAX_ATTEMPTS
    assert summary.failed_attempts == summary.remote_calls - summary.throttled
    assert f"{MAX_ATTEMPTS} failed attempts" in output


def test_the_file_can_be_reused(tmp_path: Path) -> None:
    _run(tmp_path)
    summary, _ = _run(tmp_path, posts=2, followers=2)
    assert _states(tmp_path / "demo.db") == ({"done": 2}, {"delivered": 4})
    assert summary.inbox_rows == 4


def test_ctrl_c_stops_the_worker_and_still_summarises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_progress = _live._progress
    calls = 0

    def interrupt_on_second_frame(*args: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise KeyboardInterrupt
        return real_progress(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_live, "_progress", interrupt_on_second_frame)
    summary, output = _run(tmp_path, posts=4, followers=10, latency=0.02)
    assert summary.interrupted
    assert summary.delivered + summary.undeliverable + summary.pending == summary.inbox_rows
    assert "Demo interrupted" in output
    assert _remote._active is None  # a later demo in this process can run


def test_rejects_a_failure_rate_outside_zero_to_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="failure_rate"):
        _run(tmp_path, failure_rate=1.5)


def test_the_demo_does_not_log_its_deliberate_failures(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The live table counts failures; a WARNING with a traceback for each would scroll it
    away.  Other worker news (outages) still gets through: only the failures' logger is quiet."""
    with caplog.at_level(logging.WARNING):
        summary, _ = _run(tmp_path, failure_rate=0.5)
    assert summary.failed_attempts > 0
    assert [r for r in caplog.records if r.name == "stator.worker.failures"] == []
    assert logging.getLogger("stator.worker.failures").level == logging.NOTSET  # restored
