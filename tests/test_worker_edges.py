"""Worker behaviour a user notices at once, in-process on both backends: ``run_for`` is
kept to, handler failures are logged, identities are per worker, wake-up listeners recover.

Nothing here asserts how fast anything was: where a bound matters, the test checks the
bound the worker asked for (the timeout it slept with), not the time it took."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, make_url, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from stator import State, StateGraph, SystemClock
from stator._failure_log import FailureLog
from stator._incurable import DatabaseUnusable
from stator._policy import Failed
from stator._store import Bookkeeping


class Idle(StateGraph):
    new = State(retry_after=600)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        return cls.done


class RecordingEvent(threading.Event):
    """An Event that remembers every timeout it was waited on with."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        return super().wait(timeout)


def one_waiting_row(backend: str, build_models: Any, make_stator: Any) -> Any:
    """A Stator over an ``Idle`` model whose table holds one row, due now."""
    models = build_models(Idle)
    stator = make_stator(backend, [models.Order], SystemClock())
    with Session(stator.engine) as session:
        session.add(models.Order(id=1))
        session.commit()
    return stator


# -- item 3: --run-for is kept to ---------------------------------------------------------------


def test_run_for_never_sleeps_past_its_end(backend, build_models, make_stator):
    models = build_models(Idle)
    stator = make_stator(backend, [models.Order], SystemClock())
    worker = stator.worker(run_for=0.3)
    kick = worker._signals.kick = RecordingEvent()
    summary = worker.run()
    assert summary.reason == "run-for elapsed"
    waits = [t for t in kick.timeouts if t is not None]
    assert waits and max(waits) <= 0.3


# -- item 2: handler failures are logged, and a flood of them is not ----------------------------


class Fails(StateGraph):
    new = State(retry_after=600)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        raise LookupError(f"no such customer [{row.id}]")


def test_a_worker_logs_each_handler_failure(backend, build_models, make_stator, caplog):
    models = build_models(Fails)
    stator = make_stator(backend, [models.Order], SystemClock())
    with Session(stator.engine) as session:
        session.add_all([models.Order(id=i) for i in (1, 2)])
        session.commit()
    with caplog.at_level(logging.WARNING, logger="stator.worker"):
        stator.run(until_idle=True, idle_window=0.2)
    lines = [r.getMessage() for r in caplog.records if "failed (attempt 1)" in r.getMessage()]
    assert len(lines) == 2, lines
    for pk in (1, 2):
        (line,) = [x for x in lines if x.startswith(f"orders {pk} ")]
        assert f"in state new failed (attempt 1): LookupError: no such customer [{pk}]" in line
    # the same error's traceback once at WARNING (the two messages differ: two tracebacks)
    assert sum("Traceback" in x for x in lines) == 2


def failure(message: str) -> Failed:
    return Failed("error", message, f"Traceback (most recent call last):\n  {message}\n")


def test_failure_lines_are_rate_limited_and_the_rest_counted(caplog):
    now = [0.0]
    flog = FailureLog(burst=5, window=60.0, monotonic=lambda: now[0])
    with caplog.at_level(logging.DEBUG, logger="stator.worker"):
        for pk in range(1000):
            flog.failed("orders", pk, "new", 1, failure("ValueError: boom"))
        now[0] = 61.0
        flog.failed("orders", 1000, "new", 1, failure("ValueError: boom"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    debugs = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(debugs) == 1001  # every traceback at DEBUG
    assert len(warnings) == 5 + 2  # a burst, then the count of the rest and the next line
    assert "995 more handler failure(s) not logged" in warnings[5]
    assert sum("Traceback" in w for w in warnings) == 1  # one distinct error: one traceback


# -- item 1: errors that waiting cannot cure ----------------------------------------------------


def read_only(url: str, path_of_sqlite: Path | None) -> str:
    """The same database, opened so that every write is refused."""
    if url.startswith("sqlite"):
        return f"sqlite:///file:{path_of_sqlite}?mode=ro&uri=true"
    parsed = make_url(url)
    options = parsed.query["options"] + " -cdefault_transaction_read_only=on"
    return parsed.update_query_dict({"options": options}).render_as_string(hide_password=False)


def test_until_idle_on_a_read_only_database_ends_with_one_clear_error(
    backend, build_models, make_stator, tmp_path
):
    stator = one_waiting_row(backend, build_models, make_stator)
    blocked = stator.with_db(read_only(backend, tmp_path / "stator.db"))
    worker = blocked.worker(until_idle=True, idle_window=0.2)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)  # generous: it ends at its first write
    try:
        assert not thread.is_alive(), "the worker kept retrying a read-only database"
    finally:
        worker.stop("test over")
        thread.join(30)
        blocked.dispose()
    (exc,) = raised
    assert isinstance(exc, DatabaseUnusable)
    assert "read-only" in str(exc) or "readonly" in str(exc)


def test_a_broken_model_is_reported_and_the_others_keep_running(
    backend, build_models, make_stator, caplog
):
    first = build_models(Idle, table="first_rows")
    second = build_models(Idle, table="second_rows")
    stator = make_stator(backend, [first.Order, second.Order], SystemClock())
    worker = stator.worker()
    thread = threading.Thread(target=worker.run)
    with caplog.at_level(logging.INFO, logger="stator.worker"):
        thread.start()
        try:
            with stator.engine.begin() as conn:
                conn.execute(text("DROP TABLE second_rows"))
            with Session(stator.engine) as session:
                session.add_all([first.Order(id=i) for i in range(1, 21)])
                session.commit()
            wait_for(lambda: done_count(stator, first.Order) == 20, "the healthy model's rows")
            wait_for(lambda: any("second_rows is broken" in r.getMessage()
                                 for r in caplog.records), "the broken model to be reported")
        finally:
            worker.stop("test over")
            thread.join(30)
    assert not thread.is_alive()
    broken = [r for r in caplog.records if "is broken" in r.getMessage()]
    assert len(broken) == 1 and broken[0].levelno == logging.ERROR  # once a minute, not a loop


def done_count(stator: Any, model: Any) -> int:
    with Session(stator.engine) as session:
        return int(session.scalar(
            select(func.count()).select_from(model).where(model.state == "done")
        ) or 0)


def wait_for(predicate: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout:g}s")
        time.sleep(0.05)


# -- item 16: each worker has its own identity --------------------------------------------------


def test_two_workers_in_one_process_keep_their_own_identity(backend, build_models, make_stator):
    models = build_models(Fails)
    stator = make_stator(backend, [models.Order], SystemClock())
    with Session(stator.engine) as session:
        session.add(models.Order(id=1))
        session.commit()
    first = stator.worker(until_idle=True, idle_window=0.2)
    second = stator.worker(until_idle=True, idle_window=0.2)  # same Stator, same store
    assert first.id != second.id
    first.run()
    (error,) = stator.status()["errors"]
    assert error["worker_id"] == first.id


# -- item 15: a wake-up listener that dies is restarted, closes what it opened, says so ---------


class DyingConnection:
    """A LISTEN connection whose first wait for notifications fails."""

    def __init__(self) -> None:
        self.closed = False
        self._read, self._write = os.pipe()
        os.write(self._write, b".")  # readable at once: the wait ends, notifies() breaks

    def execute(self, _sql: str) -> None:
        pass

    def fileno(self) -> int:
        return self._read

    def notifies(self, timeout: float) -> Any:
        raise RuntimeError("the listening connection broke")

    def close(self) -> None:
        self.closed = True
        os.close(self._read)
        os.close(self._write)


def test_a_dying_listener_is_restarted_closes_its_connection_and_warns(
    backend, build_models, make_stator, caplog, monkeypatch
):
    models = build_models(Idle)
    stator = make_stator(backend, [models.Order], SystemClock())
    worker = stator.worker()
    starts: list[Any] = []
    if backend.startswith("sqlite"):
        real_poll = worker._listener._poll_sqlite

        def poll() -> None:
            starts.append(None)
            if len(starts) == 1:
                raise RuntimeError("the listening connection broke")
            real_poll()

        monkeypatch.setattr(worker._listener, "_poll_sqlite", poll)
    else:
        real_connect = worker.store.listen_connection

        def connect(listen_url: str | None = None) -> Any:
            starts.append(DyingConnection() if not starts else real_connect(listen_url))
            return starts[-1]

        monkeypatch.setattr(worker.store, "listen_connection", connect)
    thread = threading.Thread(target=worker.run)
    with caplog.at_level(logging.WARNING, logger="stator.worker"):
        thread.start()
        try:
            wait_for(lambda: len(starts) >= 2, "the listener to be restarted")
        finally:
            worker.stop("test over")
            thread.join(30)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("wake-up listener stopped" in w and "broke" in w for w in warnings), warnings
    if not backend.startswith("sqlite"):
        assert starts[0].closed


def test_run_returns_only_once_the_listener_has_ended(backend, build_models, make_stator):
    """Once ``run`` returns no thread of the worker uses the store: a listener still waiting
    on its connection would open one on a disposed engine's pool (a leaked connection)."""
    models = build_models(Idle)
    stator = make_stator(backend, [models.Order], SystemClock())
    worker = stator.worker(run_for=0.3)
    worker.run()
    alive = [t.name for t in threading.enumerate() if t.name == "stator-listener"]
    assert alive == []


def test_a_stop_cuts_the_listeners_wait_short(backend, build_models, make_stator, monkeypatch):
    """The listener waits for notifications in long stretches (nothing busy-polls); a stop
    must end that wait, or every ``run`` would end one stretch late (here: two minutes)."""
    from stator._worker import _listener

    monkeypatch.setattr(_listener, "LISTEN_WAIT", 120.0)
    monkeypatch.setattr(_listener, "LISTENER_JOIN", 120.0)
    models = build_models(Idle)
    stator = make_stator(backend, [models.Order], SystemClock())
    worker = stator.worker(run_for=0.3)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "run() waited out the listener's wait"


# -- issue 20, item 11: a disk that stays full ends an --until-idle run --------------------------


def test_until_idle_gives_up_when_the_write_back_meets_a_disk_that_stays_full(
    backend, build_models, make_stator, monkeypatch
):
    """Claims work, the results cannot be written: the writer gives up after the patience
    instead of retrying for ever while the coordinator waits for it."""
    import sqlite3

    from sqlalchemy.exc import OperationalError

    from stator import _incurable

    stator = one_waiting_row(backend, build_models, make_stator)

    def full(*_args: Any, **_kwargs: Any) -> Any:
        raise OperationalError("UPDATE", {}, sqlite3.OperationalError("database or disk is full"))

    monkeypatch.setattr(_incurable, "DISK_FULL_PATIENCE", 0.0)
    monkeypatch.setattr(stator.store, "write_all", full)
    worker = stator.worker(until_idle=True, idle_window=0, run_for=10)
    try:
        worker.run()
    except DatabaseUnusable as exc:
        assert "disk is full" in str(exc)
    else:
        raise AssertionError("the worker waited on the writer until --run-for")


# -- start-up: work waiting when a worker starts is claimed first ------------------------------


def test_a_starting_worker_claims_before_its_first_heartbeat(
    backend, build_models, make_stator, monkeypatch
):
    stator = one_waiting_row(backend, build_models, make_stator)
    worker = stator.worker(until_idle=True, idle_window=0.2)
    steps: list[str] = []

    def recorded(name: str) -> Any:
        step = getattr(worker.store, name)

        def recording(*args: Any, **kwargs: Any) -> Any:
            steps.append(name)
            return step(*args, **kwargs)
        return recording

    worker.store.claim = recorded("claim")
    beat = Bookkeeping.heartbeat  # on SQLite, written on the listener's connection once it polls

    def recorded_beat(books: Bookkeeping, *args: Any) -> None:
        steps.append("heartbeat")
        beat(books, *args)

    monkeypatch.setattr(Bookkeeping, "heartbeat", recorded_beat)
    assert worker.run().processed == 1
    assert steps[:2] == ["claim", "heartbeat"]


# -- a write-back that fails in ways no retry fixes ----------------------------------------------


def test_a_write_back_the_database_refuses_is_logged_and_the_rows_run_again(
    backend, build_models, make_stator, caplog
):
    """A trigger refuses the move to ``done``: the writer logs it, the rows keep their state
    (they run again after their lease), and the worker goes on and ends as asked.  On SQLite
    the row-by-row write used to let sqlite3's own error escape the writer, whose thread died
    and left the worker waiting for ever."""
    models = build_models(Idle)
    stator = make_stator(backend, [models.Order], SystemClock())
    table = models.Order.__tablename__
    with stator.engine.begin() as conn:
        if backend.startswith("sqlite"):
            conn.execute(text(
                f"CREATE TRIGGER refuse BEFORE UPDATE OF state ON {table} "
                "WHEN NEW.state = 'done' BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END"
            ))
        else:
            conn.execute(text(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "RAISE EXCEPTION 'refused by a trigger'; END $$"
            ))
            conn.execute(text(
                f"CREATE TRIGGER refuse BEFORE UPDATE OF state ON {table} FOR EACH ROW "
                "WHEN (NEW.state = 'done') EXECUTE FUNCTION refuse()"
            ))
    with Session(stator.engine) as session:
        session.add_all([models.Order(id=i) for i in (1, 2)])
        session.commit()
    with caplog.at_level(logging.ERROR, logger="stator.worker"):
        stator.worker(until_idle=True, idle_window=0, run_for=30).run()
    (failed, *_) = [r for r in caplog.records if "writing results failed" in r.getMessage()]
    assert failed.exc_info is not None  # as SQLAlchemy's: the writer can judge it (busy, full)
    assert issubclass(failed.exc_info[0], DBAPIError), failed.exc_info[0]
    with Session(stator.engine) as session:
        states = session.scalars(select(models.Order.state)).all()
    assert states == ["new", "new"]


def test_a_write_back_that_fails_with_a_bug_loses_that_batch_only(
    backend, build_models, make_stator, monkeypatch, caplog
):
    """Not a database error at all (a bug, a write hook's mistake): logged like one, that
    batch's rows run again after their lease, and the writer lives on."""
    stator = one_waiting_row(backend, build_models, make_stator)

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise ValueError("a bug")

    monkeypatch.setattr(stator.store, "write_all", broken)
    with caplog.at_level(logging.ERROR, logger="stator.worker"):
        stator.worker(until_idle=True, idle_window=0, run_for=30).run()
    assert any("writing results failed" in r.getMessage() for r in caplog.records)


def test_a_writer_thread_that_dies_ends_the_worker_with_the_reason(
    backend, build_models, make_stator, monkeypatch
):
    """``SystemExit`` (from a write hook, say) ends the writer thread: the worker raises
    why, rather than waiting for results that will never be written."""
    from stator._worker._writer import WriterDied

    stator = one_waiting_row(backend, build_models, make_stator)

    def leave(*_args: Any, **_kwargs: Any) -> Any:
        raise SystemExit(3)

    monkeypatch.setattr(stator.store, "write_all", leave)
    worker = stator.worker(run_for=30)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)  # without the fix it never ends
    thread.start()
    thread.join(20)
    if thread.is_alive():
        worker.stop("test over")
        raise AssertionError("the worker waited on its dead writer")
    (exc,) = raised
    assert isinstance(exc, WriterDied) and "SystemExit(3)" in str(exc)
