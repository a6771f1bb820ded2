"""The Django store's promises under settings other than Django's defaults.

- A worker holds one connection per thread, closes each as its thread ends, and never holds
  more than CONCURRENCY + 3 at once, with persistent connections (``CONN_MAX_AGE=None``),
  async handlers on the async ORM, or task rows.
- On SQLite every write (claims, handlers' writes, batched write-backs, bookkeeping) runs in
  a transaction begun with ``BEGIN IMMEDIATE``, whatever ``transaction_mode`` and
  ``CONN_MAX_AGE`` say, also on a connection Django closed and reopened mid-cycle.
- Handlers that write nothing share one batched write-back, with no commit of their own.
- Async handlers may use the async ORM: their rows persist, and a connection of theirs that
  was lost is replaced.
- An idle ``manage.py runstator`` on a SQLite file picks up another process's insert well
  before its own heartbeat would have woken it.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from asgiref.sync import sync_to_async
from django.db import connections, models
from django.db.backends.signals import connection_created
from django.test.utils import isolate_apps, override_settings
from djtest.orders.models import Job, Order, Receipt
from sqlalchemy import event
from test_django_processes import _start, project  # noqa: F401

from stator import ManualClock, State, StateGraph
from stator._worker._housekeeping import HEARTBEAT_EVERY
from stator.django._setup import build_stator
from stator.django.models import StatorModel

CONCURRENCY = 3
# What a worker may hold besides its handler threads' connections: the coordinator's, the
# writer's and (PostgreSQL) the LISTEN connection.
FIXED_CONNECTIONS = 3


class AsyncJobStates(StateGraph):
    """An async handler writing through the async ORM (another model: its own row persists
    whatever the transition does)."""

    waiting = State()
    done = State()
    waiting.transitions_to(done)

    @classmethod
    async def check_waiting(cls, job: Any) -> Any:
        await Order.objects.using(job._state.db).acreate(note=f"async {job.pk}")
        return cls.done


def job_model(name: str, graph: type[StateGraph]) -> Any:
    """``orders_job`` run by ``graph``: a model of its own, out of the app registry."""
    meta = type("Meta", (), {"app_label": "orders", "db_table": "orders_job", "managed": False})
    with isolate_apps("djtest.orders"):
        return type(name, (StatorModel,), {
            "__module__": __name__, "Meta": meta, "state_graph": graph,
            "kind": models.CharField(max_length=20, default="ok"),
        })


AsyncJob = job_model("AsyncJob", AsyncJobStates)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC) + timedelta(seconds=5))


@contextlib.contextmanager
def database_settings(alias: str, **changes: Any) -> Iterator[None]:
    """``alias`` reconfigured for every thread's connection (they share one settings dict),
    from a fresh connection on; restored afterwards."""
    conn = connections[alias]
    saved = dict(conn.settings_dict)
    conn.close()
    conn.settings_dict.update(changes)
    try:
        yield
    finally:
        conn.close()
        conn.settings_dict.clear()
        conn.settings_dict.update(saved)


# -- 1. connections: one per thread, closed with it, a bounded number ------------------------


def _others(watcher: psycopg.Connection[Any], name: str) -> int:
    """Connections to database ``name`` besides ``watcher``."""
    row = watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                          "AND pid <> pg_backend_pid()", [name]).fetchone()
    return int(row[0]) if row else 0


def _worker_connections(alias: str, run: Callable[[], None]) -> tuple[int, int, int]:
    """The test database's connections (besides this one's): before, at most while ``run``
    runs in a thread of its own, and once they are all closed (or 30 s later)."""
    name = connections[alias].settings_dict["NAME"]
    with psycopg.connect(host="127.0.0.1", user="postgres", dbname=name,
                         autocommit=True) as watcher:

        def count() -> int:
            return _others(watcher, name)

        baseline = count()  # this thread's own Django connection
        runner = threading.Thread(target=run)
        runner.start()
        most = 0
        while runner.is_alive():
            most = max(most, count())
            runner.join(0.01)
        deadline = time.monotonic() + 30
        while count() > baseline and time.monotonic() < deadline:
            time.sleep(0.05)  # closing is asynchronous on the server's side
        return baseline, most, count()


def _run_worker(models: list[type], alias: str) -> Callable[[], None]:
    return _running(build_stator(models=models, alias=alias, concurrency=CONCURRENCY).worker(
        until_idle=True))


def _running(worker: Any) -> Callable[[], None]:
    """Run ``worker``, then close the connection of the thread that ran it (as runstator's
    main thread does)."""

    def run() -> None:
        try:
            worker.run()
        finally:
            worker.store.thread_done()

    return run


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("work", ["writing-and-not", "async-orm", "tasks"])
def test_a_worker_with_persistent_connections_holds_a_bounded_number(work: str) -> None:
    """CONN_MAX_AGE=None (Django would keep each connection for ever): a worker still closes
    every connection it opened, and never holds more than CONCURRENCY + 3 at once, with
    handlers that write (slow path), that do not (fast path: the writer's connection too),
    async handlers on the async ORM (a thread of asgiref's), and Django task rows."""
    with database_settings("pg", CONN_MAX_AGE=None), contextlib.ExitStack() as stack:
        if work == "writing-and-not":
            Order.objects.using("pg").bulk_create([Order(paid=i % 2 == 0) for i in range(150)])
            Job.objects.using("pg").bulk_create([Job() for _ in range(150)])
            run_models: list[type] = [Order, Job]
        elif work == "async-orm":
            Job.objects.using("pg").bulk_create([Job() for _ in range(60)])
            run_models = [AsyncJob]
        else:
            pytest.importorskip("django.tasks", reason="the task backend needs Django >= 6.0")
            import tasks_jobs

            from stator.django._task_model import StatorTask

            stack.enter_context(override_settings(
                TASKS=tasks_jobs.TASKS, STATOR={"CONCURRENCY": CONCURRENCY, "DATABASE": "pg"}))
            results = [tasks_jobs.add.enqueue(i, 1) for i in range(60)]
            Order.objects.using("pg").bulk_create([Order(paid=True) for _ in range(60)])
            run_models = [StatorTask, Order]
        baseline, most, after = _worker_connections("pg", _run_worker(run_models, "pg"))
        assert 0 < most - baseline <= CONCURRENCY + FIXED_CONNECTIONS, (baseline, most)
        assert after == baseline, "a connection outlived the worker"
        if work == "writing-and-not":
            assert Order.objects.using("pg").filter(state="charged").count() == 75
            assert Job.objects.using("pg").filter(state="done").count() == 150
        elif work == "async-orm":
            assert Job.objects.using("pg").filter(state="done").count() == 60
        else:
            assert [r.task.get_result(r.id).return_value for r in results] == [
                i + 1 for i in range(60)]


# -- 2. SQLite: the write lock up front, whatever the settings ------------------------------

WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class SqliteTrace:
    """Every statement on every new Django SQLite connection of ``alias`` (whichever thread
    opens it, reopened ones included), with whether a transaction was open when it began."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.by_connection: dict[int, list[tuple[str, bool]]] = {}
        self._raws: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def __enter__(self) -> SqliteTrace:
        connections[self.alias].close()  # this thread's too: reopened, so traced
        connection_created.connect(self._opened)
        return self

    def __exit__(self, *exc: object) -> None:
        connection_created.disconnect(self._opened)
        for raw in self._raws:
            with contextlib.suppress(sqlite3.ProgrammingError):  # closed already
                raw.set_trace_callback(None)

    def _opened(self, sender: Any, connection: Any, **_kw: Any) -> None:
        if connection.alias != self.alias:
            return
        raw: sqlite3.Connection = connection.connection
        seen: list[tuple[str, bool]] = []
        with self._lock:
            self.by_connection[len(self.by_connection)] = seen
            self._raws.append(raw)
        raw.set_trace_callback(lambda sql: seen.append((sql, raw.in_transaction)))

    def writes(self) -> list[tuple[str, str | None]]:
        """Each write statement with the statement that began its transaction (None: it
        ran outside any transaction)."""
        found: list[tuple[str, str | None]] = []
        for seen in self.by_connection.values():
            began: str | None = None
            for sql, in_transaction in seen:
                if not in_transaction:
                    began = sql if sql.upper().startswith(("BEGIN", "SAVEPOINT")) else None
                if _is_write(sql):
                    found.append((sql, began))
        return found


def _is_write(sql: str) -> bool:
    head = sql.lstrip().upper()
    if head.startswith("WITH"):  # the claim: an UPDATE … RETURNING behind a CTE
        return any(f") {w} " in head for w in WRITES)
    return head.startswith(WRITES)


def _assert_write_lock_up_front(trace: SqliteTrace, *expected: str) -> None:
    writes = trace.writes()
    deferred = [(sql[:60], began) for sql, began in writes if began != "BEGIN IMMEDIATE"]
    assert not deferred, f"writes without the write lock taken up front: {deferred}"
    for fragment in expected:  # the paths the run had to take
        assert any(fragment in sql for sql, _ in writes), (fragment, [s[:60] for s, _ in writes])


SQLITE_SETTINGS = {
    "transaction_mode=DEFERRED": {"OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;",
                                              "transaction_mode": "DEFERRED"}},
    "CONN_MAX_AGE=None": {"CONN_MAX_AGE": None},
    "both": {"CONN_MAX_AGE": None, "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;",
                                                "transaction_mode": "DEFERRED"}},
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("configured", list(SQLITE_SETTINGS))
def test_sqlite_worker_writes_take_the_write_lock_up_front(configured: str) -> None:
    """A worker's every write: claims, handlers' own writes (their atomic blocks), batched
    write-backs, failure records, heartbeats and stats."""
    Order.objects.bulk_create([Order(paid=True) for _ in range(20)])
    Job.objects.bulk_create([Job(kind="fail" if i % 5 == 0 else "ok") for i in range(20)])
    with database_settings("default", **SQLITE_SETTINGS[configured]), \
            SqliteTrace("default") as trace:
        build_stator(models=[Order, Job], concurrency=2).worker(until_idle=True).run()
        _assert_write_lock_up_front(
            trace, "WITH due AS", 'INSERT INTO "orders_receipt"', "UPDATE orders_job",
            "INSERT INTO stator_errors", "stator_workers",
        )
    assert Receipt.objects.count() == 20
    assert Job.objects.filter(state="done").count() == 16


@pytest.mark.django_db(transaction=True)
def test_sqlite_writes_take_the_write_lock_up_front_on_a_reopened_connection(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Django closes a connection whenever it likes (CONN_MAX_AGE, an error): the claim, the
    handlers' writes and the write-back each find a new one, and still begin IMMEDIATE."""
    Order.objects.bulk_create([Order(paid=True) for _ in range(3)])
    Job.objects.bulk_create([Job() for _ in range(3)])
    with database_settings("default", **SQLITE_SETTINGS["both"]), \
            SqliteTrace("default") as trace:
        stator = build_stator(models=[Order, Job], clock=clock)
        store = stator.store
        claim, write_all = store.claim, store.write_all

        def claim_then_close(*args: Any, **kwargs: Any) -> Any:
            claimed = claim(*args, **kwargs)
            connections["default"].close()  # the handlers run on a reopened connection
            return claimed

        def close_then_write(*args: Any, **kwargs: Any) -> Any:
            connections["default"].close()
            return write_all(*args, **kwargs)

        monkeypatch.setattr(store, "claim", claim_then_close)
        monkeypatch.setattr(store, "write_all", close_then_write)
        connections["default"].close()
        report = stator.run_once()
        assert report.transitions == 6
        assert len(trace.by_connection) >= 4  # opened, reopened after each claim and before
        _assert_write_lock_up_front(
            trace, "WITH due AS", 'INSERT INTO "orders_receipt"', "UPDATE orders_job")
    assert Receipt.objects.count() == 3


# -- 3. the fast path: no-write handlers share one batched write ------------------------------


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("alias", ["default", "pg"])
def test_handlers_that_write_nothing_share_one_batched_write(
    alias: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """N handlers that only return a state: their N transitions go out together, in one
    fenced statement (PostgreSQL) or one transaction of per-row UPDATEs (SQLite), and no
    handler commits anything of its own."""
    n = 8
    pks = {j.pk for j in Job.objects.using(alias).bulk_create([Job() for _ in range(n)])}
    stator = build_stator(models=[Job], clock=clock, alias=alias)
    conn = connections[alias]
    commits: list[None] = []
    django_commit = conn.commit

    def counted_commit() -> None:
        commits.append(None)
        django_commit()

    monkeypatch.setattr(conn, "commit", counted_commit)  # a handler's atomic block commits
    if alias == "default":
        with SqliteTrace(alias) as trace:
            report = stator.run_once()
        (seen,) = trace.by_connection.values()
        seen = [(sql, t) for sql, t in seen if not sql.startswith("PRAGMA")]  # connecting
        shape = [sql.split()[0] for sql, _ in seen]
        assert shape == ["BEGIN", "WITH", "COMMIT", "BEGIN", *["UPDATE"] * n, "COMMIT"], seen
        assert all(sql.startswith("UPDATE orders_job") for sql, _ in seen[4:-1])
    else:
        statements: list[tuple[str, Any]] = []

        def note(_c: Any, _cursor: Any, sql: str, params: Any, _ctx: Any, _many: bool) -> None:
            statements.append((sql, params))

        event.listen(stator.store.engine, "before_cursor_execute", note)
        try:
            report = stator.run_once()
        finally:
            event.remove(stator.store.engine, "before_cursor_execute", note)
        fenced = [(sql, params) for sql, params in statements
                  if sql.lstrip().startswith("UPDATE orders_job")]
        assert len(fenced) == 1, statements
        batch = {int(pk) for pk in fenced[0][1]["b_pk"].strip("{}").split(",")}
        assert batch == pks
    assert commits == []
    assert report.transitions == n
    assert Job.objects.using(alias).filter(state="done").count() == n


# -- 4. async handlers on the async ORM ----------------------------------------------------


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("alias", ["default", "pg"])
@pytest.mark.parametrize("runner", ["worker", "run_once"])
def test_async_handlers_may_use_the_async_orm(
    alias: str, runner: str, clock: ManualClock
) -> None:
    """Inline (``run_once``: its own event loop) and in a worker (the worker's loop)."""
    pks = {j.pk for j in Job.objects.using(alias).bulk_create([Job() for _ in range(5)])}
    if runner == "worker":
        worker = build_stator(models=[AsyncJob], alias=alias, concurrency=2).worker(
            until_idle=True)
        summary = worker.run()
        assert sum(c.transitions for c in summary.counters.values()) == 5
    else:
        stator = build_stator(models=[AsyncJob], alias=alias, clock=clock)
        assert stator.run_once().transitions == 5
    if alias == "pg":  # the async ORM's connection (a thread of asgiref's) was closed after
        name = connections[alias].settings_dict["NAME"]
        with psycopg.connect(host="127.0.0.1", user="postgres", dbname=name,
                             autocommit=True) as watcher:
            deadline = time.monotonic() + 30
            while _others(watcher, name) > 1 and time.monotonic() < deadline:
                time.sleep(0.05)  # closing is asynchronous on the server's side
            assert _others(watcher, name) == 1  # this thread's own
    notes = set(Order.objects.using(alias).values_list("note", flat=True))
    assert notes == {f"async {pk}" for pk in pks}
    assert set(Job.objects.using(alias).values_list("state", flat=True)) == {"done"}


class LostLinkStates(StateGraph):
    """As ``AsyncJobStates``; a job of kind "kill" first ends its own connection's server
    process (what a server restart does to it), and fails on it."""

    waiting = State(retry_after=3600)
    done = State()
    waiting.transitions_to(done)

    @classmethod
    async def check_waiting(cls, job: Any) -> Any:
        db = job._state.db
        if job.kind == "kill":
            await sync_to_async(_end_own_server_process)(db)
        await Order.objects.using(db).acreate(note=f"async {job.pk}")
        return cls.done


def _end_own_server_process(alias: str) -> None:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")


LostLinkJob = job_model("LostLinkJob", LostLinkStates)


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.05)


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
def test_async_handlers_get_a_new_connection_once_theirs_is_lost() -> None:
    """The async ORM's connection lives in a thread of asgiref's for the worker's whole run;
    once its server process is gone, the next async handlers must not all fail on it."""
    alias = "pg"
    jobs = Job.objects.using(alias)
    killer = jobs.create(kind="kill")
    worker = build_stator(models=[LostLinkJob], alias=alias, concurrency=2).worker()
    runner = threading.Thread(target=_running(worker))
    runner.start()
    try:
        _wait_for(lambda: jobs.get(pk=killer.pk).state_attempts == 1, "the lost connection")
        pks = {j.pk for j in jobs.bulk_create([Job() for _ in range(3)])}
        _wait_for(lambda: jobs.filter(pk__in=pks, state="done").count() == 3,
                  "the jobs after it")
    finally:
        worker.stop()
        runner.join(60)
    assert jobs.get(pk=killer.pk).state == "waiting"
    notes = set(Order.objects.using(alias).values_list("note", flat=True))
    assert notes == {f"async {pk}" for pk in pks}


# -- 5. SQLite: another process's insert wakes an idle runstator -----------------------------


@pytest.mark.slow
@pytest.mark.parametrize("project", ["sqlite"], indirect=True)
def test_an_idle_runstator_picks_up_another_processes_insert(
    project: dict[str, str], tmp_path: Path,  # noqa: F811
) -> None:
    """On SQLite an idle worker is woken by a change of ``PRAGMA data_version`` (checked
    every SQLITE_POLL = 0.1 s).  Without it, the only thing that would wake it is its own
    heartbeat, every HEARTBEAT_EVERY = 5 s: the row inserted just after a heartbeat must be
    handled within half of that."""
    proc, alive = _start(project, tmp_path)
    try:
        beat = alive.stat().st_mtime_ns
        deadline = time.monotonic() + 3 * HEARTBEAT_EVERY
        while alive.stat().st_mtime_ns == beat:  # a heartbeat just went by: the next is 5 s off
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        handled_by = time.monotonic() + HEARTBEAT_EVERY / 2
        with sqlite3.connect(project["DJTEST_SQLITE"], timeout=30) as db:
            db.execute("INSERT INTO orders_order (paid, note) VALUES (1, 'from elsewhere')")
        with contextlib.closing(sqlite3.connect(project["DJTEST_SQLITE"], timeout=30)) as db:

            def state() -> str:
                return str(db.execute("SELECT state FROM orders_order WHERE note = ?",
                                      ["from elsewhere"]).fetchone()[0])

            while state() != "charged" and time.monotonic() < handled_by:
                time.sleep(0.02)
            assert state() == "charged", "the idle worker was not woken by the insert"
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
def test_a_django_worker_holds_a_bounded_number_of_connections() -> None:
    """CONCURRENCY handler threads + coordinator + writer + listener, whatever CONN_MAX_AGE
    says, and all of them closed when the worker ends (Takahē ran out of slots)."""
    Order.objects.using("pg").bulk_create([Order(paid=True) for _ in range(200)])
    stator = build_stator(models=[Order], alias="pg", concurrency=3)
    worker = stator.worker(until_idle=True)
    name = connections["pg"].settings_dict["NAME"]
    with psycopg.connect(host="127.0.0.1", user="postgres", dbname=name,
                         autocommit=True) as watcher:

        def count() -> int:
            row = watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                                  "AND pid <> pg_backend_pid()", [name]).fetchone()
            return int(row[0]) if row else 0

        baseline = count()  # the test's own Django connection

        def run() -> None:
            try:
                worker.run()
            finally:
                worker.store.thread_done()

        runner = threading.Thread(target=run)
        runner.start()
        most = 0
        while runner.is_alive():
            most = max(most, count() - baseline)
            runner.join(0.01)
        assert 0 < most <= 3 + 3
        deadline = time.monotonic() + 30
        while count() > baseline and time.monotonic() < deadline:
            time.sleep(0.05)  # closing is asynchronous on the server's side
        assert count() == baseline
    assert Order.objects.using("pg").filter(state="charged").count() == 200
