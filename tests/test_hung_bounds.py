"""Handlers that hang for good cannot grow a worker's threads (nor, with them, its
connections): at most ``max_hung`` hung handler threads are replaced; one more and the
worker claims nothing more, hands its unstarted rows back, finishes what runs and stops with
``TOO_MANY_HUNG``; ``stator run`` then exits 75 with one line saying why, for its supervisor
to restart it.  On both backends, in-process; the handlers wait on an event the test sets.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, make_url, select
from sqlalchemy.orm import Session

from stator import State, StateGraph, SystemClock
from stator._launcher._children import URL_VARIABLE, url_parts
from stator._worker import TOO_MANY_HUNG, RunSummary
from stator._worker.serving import EXIT_HUNG
from stator.cli import main
from stator.errors import ConfigError

PATIENCE = 30.0  # seconds any wait below gives up after (a failure, never a pass)
release = threading.Event()
_apps = itertools.count()


class Hangs(StateGraph):
    new = State(timeout=0.3, retry_after=600)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        release.wait(PATIENCE)  # far past the deadline, until the test is over
        return cls.done


def handler_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """The handler threads started since ``before`` and still alive."""
    return [t for t in set(threading.enumerate()) - before
            if t.name.startswith("stator-handler-") and t.is_alive()]


@pytest.fixture
def released() -> Iterator[None]:
    """The hanging handlers return once the test is over, whatever happened."""
    release.clear()
    yield
    release.set()


def count(stator: Any, model: Any, *where: Any) -> int:
    with Session(stator.engine) as session:
        return int(session.scalar(select(func.count()).select_from(model).where(*where)) or 0)


def test_a_worker_with_too_many_hung_handlers_stops_within_its_thread_bound(
    backend: str, build_models: Any, make_stator: Any, released: None
) -> None:
    models = build_models(Hangs)
    stator = make_stator(backend, [models.Order], SystemClock())
    with Session(stator.engine) as session:
        session.add_all([models.Order(id=i) for i in range(1, 21)])
        session.commit()
    before = set(threading.enumerate())
    worker = stator.worker(concurrency=2, max_hung=2)
    result: list[RunSummary] = []
    runner = threading.Thread(target=lambda: result.append(worker.run()))
    runner.start()
    most = 0
    while runner.is_alive():  # the run ends by itself, once the cap is passed
        most = max(most, len(handler_threads(before)))
        runner.join(0.01)
    (summary,) = result
    assert summary.reason == TOO_MANY_HUNG and summary.needs_restart
    hung = handler_threads(before)
    assert 2 + 1 <= len(hung) <= 2 + 2 and summary.hung == len(hung)
    assert most <= 2 + 2  # concurrency + max_hung, however many rows hang
    timed_out = count(stator, models.Order, models.Order.state_attempts == 1)
    assert timed_out == len(hung)  # each hung handler's row: one attempt, a timeout
    assert {e["kind"] for e in stator.status()["errors"]} == {"timeout"}
    # The rest were handed back untouched (no attempt counted), due at once.
    assert count(stator, models.Order, models.Order.state_attempts == 0) == 20 - timed_out
    release.set()
    for thread in hung:
        thread.join(PATIENCE)
        assert not thread.is_alive()
    assert count(stator, models.Order, models.Order.state == "done") == 0  # too late


@pytest.mark.parametrize("value", [-1, 257])
def test_max_hung_out_of_range_is_refused(
    backend: str, build_models: Any, make_stator: Any, value: int
) -> None:
    stator = make_stator(backend, [build_models(Hangs).Order], SystemClock())
    with pytest.raises(ConfigError, match="max_hung must be 0 to 256"):
        stator.worker(max_hung=value)


APP_SOURCE = '''
import threading

from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from stator import State, StateGraph, Stator
from stator.sqlalchemy import StatorMixin

RELEASE = threading.Event()


class Base(DeclarativeBase):
    pass


class Hangs(StateGraph):
    new = State(timeout=0.3, retry_after=600)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row):
        RELEASE.wait(30)
        return cls.done


class Job(StatorMixin, Base):
    __tablename__ = "hung_jobs"
    state_graph = Hangs
    id: Mapped[int] = mapped_column(primary_key=True)


stator = Stator({url!r}, models=[Job])
'''


@pytest.mark.parametrize(("command", "cap"), [
    (["run", "--concurrency", "2", "--max-hung", "1", "--log-level", "ERROR"], 1),
    (["launcher-scheduler", "--concurrency", "2", "--log-level", "ERROR"], 2),  # the default
])
def test_stator_run_exits_75_with_one_line_once_too_many_handlers_hang(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], command: list[str], cap: int,
) -> None:
    """``stator run``, and a launcher's scheduler (whose launcher counts 75 as a crash and
    starts it again)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    name = f"hung_app_{next(_apps)}"
    (tmp_path / f"{name}.py").write_text(APP_SOURCE.format(url=backend))
    app = f"{name}:stator"
    with pytest.raises(SystemExit) as migrated:
        main(["migrate", app])
    assert migrated.value.code in (0, None)
    stator = sys.modules[name].stator
    with Session(stator.engine) as session:
        session.add_all([sys.modules[name].Job(id=i) for i in range(1, 11)])
        session.commit()
    before = set(threading.enumerate())
    try:
        with pytest.raises(SystemExit) as ran:
            if command[0] == "launcher-scheduler":  # the launcher hands the URL over so
                monkeypatch.setenv(URL_VARIABLE, url_parts(make_url(backend)))
            main([command[0], app, *command[1:]])
        assert ran.value.code == EXIT_HUNG
        assert len(handler_threads(before)) <= 2 + cap
    finally:
        sys.modules[name].RELEASE.set()
        stator.dispose()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1
    assert f"more than {cap} handler threads hung" in lines[0] and "exit 75" in lines[0]
    for thread in handler_threads(before):
        thread.join(PATIENCE)
