"""``Stator``: the application's handle on its models, its database and its workers."""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import URL, ColumnElement, Connection, Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ._clock import Clock, SystemClock
from ._execute import Executor, Task
from ._graph import State
from ._limits import MAX_CONCURRENCY
from ._policy import Write
from ._schedules import parse_for_models, sync, with_schedule_model
from ._store import TrackedModel
from ._store.interface import Driver
from ._urls import shown
from ._worker import RunSummary, Worker, WorkerOptions
from .errors import ConfigError, TransitionError

if TYPE_CHECKING:  # parsed only where schedules are declared (see _schedule_graph)
    from ._schedule import Schedule


@dataclass
class CycleReport:
    """What one ``run_once`` did."""

    claimed: int = 0
    transitions: int = 0
    errors: int = 0
    lost: int = 0
    per_model: dict[str, int] = field(default_factory=dict)


class Stator:
    """Binds models (each with a ``state_graph``) to a database, and runs them.

    ``db`` is a URL (``sqlite:///file.db``, ``postgresql+psycopg://…``, as text or a
    SQLAlchemy ``URL``) or a SQLAlchemy ``Engine``.  ``clock`` is injectable so tests can
    jump over retry intervals.
    """

    _synced = False  # whether run_once has made the schedules follow the code yet

    def __init__(
        self,
        db: str | URL | Engine,
        models: Sequence[type],
        *,
        clock: Clock | None = None,
        concurrency: int = 4,
        batch_size: int = 100,
        listen_url: str | None = None,
        schedules: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        # The SQLAlchemy driver and ORM, here: a Django worker (``_over_store``) never loads them.
        from ._store._store import Store
        from .sqlalchemy import StatorMixin

        if not models:
            raise ConfigError("Stator needs at least one model")
        for model in models:
            if not (isinstance(model, type) and issubclass(model, StatorMixin)):
                raise ConfigError(f"{model!r} is not a model using StatorMixin")
        check_concurrency(concurrency)
        if batch_size < 1:
            raise ConfigError("batch_size must be at least 1")
        self.models = list(models)
        self.clock: Clock = clock or SystemClock()
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.listen_url = listen_url  # PostgreSQL: a direct connection for wake-ups
        self.declared, self.schedules = schedules, parse_for_models(schedules, self.models)
        run = with_schedule_model(self.models, self.schedules)
        if isinstance(db, Engine):
            self.engine = db
        else:
            from ._store._engine import create_engine_for

            self.engine = create_engine_for(db, concurrency)
        try:
            self.store: Driver = Store(self.engine, run, clock=self.clock)
        except BaseException:
            if not isinstance(db, Engine):  # ours: no connection of it outlives the refusal
                self.engine.dispose()
            raise

    @classmethod
    def _over_store(
        cls, store: Driver, models: Sequence[type], *, clock: Clock | None = None,
        concurrency: int = 4, batch_size: int = 100, listen_url: str | None = None,
        schedules: list[Schedule] | None = None,
    ) -> Stator:
        """A Stator over a store built elsewhere (Django's), its ``schedules`` checked."""
        self = cls.__new__(cls)
        self.models = list(models)
        self.declared, self.schedules = None, schedules
        self.clock = clock or store.clock
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.listen_url = listen_url
        self.engine = store.engine
        self.store = store
        return self

    @property
    def url(self) -> str:
        """The database URL as it may be shown (no password, no secret parameter)."""
        return shown(self.engine.url)

    def with_db(self, db: str | URL | Engine) -> Stator:
        """The same models and settings bound to another database."""
        return Stator(
            db, self.models, clock=self.clock, concurrency=self.concurrency,
            batch_size=self.batch_size, schedules=self.declared,
        )

    def dispose(self) -> None:
        self.engine.dispose()

    # -- schema ----------------------------------------------------------------------------

    def migrate(self) -> list[str]:
        """Create or upgrade Stator's tables and the models' columns; returns what it did."""
        return self.store.migrate()

    def check(self) -> None:
        """Raise ``SchemaError`` (naming the fix) unless the database is ready to be run."""
        self.store.check_ready()

    def uninstall(self) -> list[str]:
        """Drop Stator's own tables (not your tables, nor their Stator columns) and, in the
        same transaction, send the launcher ``restart``: its scheduler for this database
        then finds no schema and is disabled.  Returns what it did."""
        from ._launcher._messages import has_table, send_message

        def restart_launcher(conn: Connection) -> None:
            if has_table(conn):
                send_message(conn, "restart", clock=self.clock)

        return self.store.uninstall(restart_launcher)

    # -- running ---------------------------------------------------------------------------

    def run_once(self, *, raise_errors: bool = True) -> CycleReport:
        """Claim one batch per model, run its handlers inline and write the results.

        For tests: a handler's exception (or a disallowed return value) is recorded against
        its row like in a worker, then raised here (unless ``raise_errors`` is false, as for
        Django's in-request runner).
        """
        self._synced or self.sync_schedules()
        executor = Executor(self.store, self.clock)
        report = CycleReport()
        first_error: BaseException | None = None
        groups: list[tuple[TrackedModel, list[Write]]] = []
        for tracked in self.store.tracked:
            writes: list[Write] = []
            claimed = tracked.in_claim_order(
                self.store.claim(tracked, self.clock.now(), self.batch_size)
            )
            report.per_model[tracked.name] = len(claimed)
            report.claimed += len(claimed)
            for obj, row in claimed:
                task = executor.prepare(tracked, obj, row)
                self._run_inline(executor, task)
                report.lost += task.lost
                if task.write is not None:
                    writes.append(task.write)
                    failure = task.write.failure
                    if failure is not None:
                        report.errors += 1
                        # A failure its handler decided about is an outcome, not raised.
                        if first_error is None and failure.then is None:
                            first_error = task.error or TransitionError(failure.message)
                elif task.committed is not None:
                    report.transitions += task.committed.moved
            groups.append((tracked, writes))
        lost = self.store.write_all(groups)
        report.lost += sum(len(v) for v in lost.values())
        for tracked, writes in groups:  # like the worker, count only the moves written
            refused = lost.get(tracked.name, set())
            report.transitions += sum(w.moved and w.pk not in refused for w in writes)
        if first_error is not None and raise_errors:
            raise first_error
        return report

    def _run_inline(self, executor: Executor, task: Task) -> None:
        if not executor.before(task):
            return
        if task.tracked.graph.states[task.claimed.state].handler_is_async:
            asyncio.run(_run_async_inline(executor, task))
        else:
            executor.run_sync(task)

    def worker(
        self,
        *,
        concurrency: int | None = None,
        until_idle: bool = False,
        idle_window: float = 1.0,
        run_for: float | None = None,
        models: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
        liveness_file: str | Path | None = None,
        max_tasks: int | None = None,
        worker_id: str | None = None,
        max_hung: int | None = None,
    ) -> Worker:
        """A worker for this database; call ``.run()`` on it (``.stop()`` from elsewhere).

        ``max_tasks``: stop gracefully once this many rows have been claimed for their
        handlers (a supervisor then starts a fresh process).  ``worker_id``: the worker's
        name in the heartbeat table, errors and task results (unique per worker, at most
        64 characters); by default the process id and a random part.  ``max_hung`` (default:
        the concurrency): how many handler threads hung past their deadline it replaces; one
        more and it stops with ``RunSummary.needs_restart`` set, since only a new process
        gets those threads and their connections back."""
        if run_for is not None and not 0 < run_for < math.inf:
            raise ConfigError(f"run_for must be a number of seconds > 0 (got {run_for}; leave it "
                              "out to run until stopped)")
        if not 0 <= idle_window < math.inf:
            raise ConfigError(f"idle_window must be a number of seconds >= 0 (got {idle_window})")
        if liveness_file is not None:
            _check_liveness_file(Path(liveness_file))
        options = WorkerOptions(
            concurrency=concurrency or self.concurrency, batch_size=self.batch_size,
            until_idle=until_idle, idle_window=idle_window, run_for=run_for,
            liveness_file=Path(liveness_file) if liveness_file else None,
            listen_url=self.listen_url, max_tasks=max_tasks, worker_id=worker_id,
            max_hung=max_hung,
        )
        check_concurrency(options.concurrency)
        if max_tasks is not None and max_tasks < 1:
            raise ConfigError("max_tasks must be at least 1")
        if worker_id is not None and not 0 < len(worker_id) <= 64:
            raise ConfigError("worker_id must be 1 to 64 characters")
        if max_hung is not None and not 0 <= max_hung <= MAX_CONCURRENCY:
            raise ConfigError(f"max_hung must be 0 to {MAX_CONCURRENCY} (got {max_hung})")
        if self.listen_url is not None:
            try:
                make_url(self.listen_url)
            except (ArgumentError, ValueError) as exc:
                raise ConfigError(
                    f"listen_url is not a database URL: {shown(self.listen_url)!r}"
                ) from exc
        self.check()
        self.sync_schedules()
        return Worker(self.store, self.clock, self._select(models, exclude), options)

    def sync_schedules(self) -> list[str]:
        """Make the schedules' rows follow those declared (a worker's start); what changed."""
        self._synced = True
        return sync(self.engine, self.schedules, self.clock.now())

    def run(self, **options: Any) -> RunSummary:
        """Run a worker in this thread until stopped, idle (``until_idle``) or ``run_for``."""
        return self.worker(**options).run()

    def _select(
        self, models: Iterable[str] | None, exclude: Iterable[str] | None
    ) -> list[TrackedModel]:
        names = {t.name: t for t in self.store.tracked}
        aliases = {t.model.__name__: t for t in self.store.tracked}
        chosen = list(self.store.tracked)
        if models:
            chosen = [self._lookup(n, names, aliases) for n in models]
        if exclude:
            dropped = {self._lookup(n, names, aliases).name for n in exclude}
            chosen = [t for t in chosen if t.name not in dropped]
        if not chosen:
            raise ConfigError("no models left to run after --models/--exclude")
        return chosen

    @staticmethod
    def _lookup(
        name: str, names: dict[str, TrackedModel], aliases: dict[str, TrackedModel]
    ) -> TrackedModel:
        found = names.get(name) or aliases.get(name)
        if found is None:
            known = ", ".join(sorted(names))
            raise ConfigError(f"unknown model {name!r} (known: {known})")
        return found

    # -- application-side transitions -------------------------------------------------------

    def transition_many(
        self, model: type, to: State | str, *where: ColumnElement[bool]
    ) -> int:
        """Move every row of ``model`` matching ``where`` to ``to`` in one statement; commits."""
        from sqlalchemy.orm import Session

        if model not in self.models:
            raise ConfigError(f"{model.__name__} is not one of this Stator's models")
        with Session(self.engine) as session:
            moved: int = model.transition_many(  # type: ignore[attr-defined]
                session, to, *where, clock=self.clock
            )
            session.commit()
        return moved

    # -- observability ---------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Per model and state: rows, due, oldest due, failing; recent stats, errors, workers.
        (Its module is imported here: a worker never reports, and starts without it.)"""
        from ._status_report import status_report

        self.check()
        return status_report(self.store, self.engine, self.url, self.clock.now())


async def _run_async_inline(executor: Executor, task: Task) -> None:
    """An async handler on an event loop of its own (``asyncio.run``), closed after it as
    the worker's loop is (``Driver.loop_done``)."""
    try:
        await executor.run_async(task)
    finally:
        await executor.store.loop_done()


def check_concurrency(concurrency: int) -> None:
    if concurrency < 1:
        raise ConfigError("concurrency must be at least 1")
    if concurrency > MAX_CONCURRENCY:
        raise ConfigError(
            f"concurrency must be at most {MAX_CONCURRENCY} (got {concurrency}): each handler "
            "thread may hold a database connection; run more workers instead"
        )


def _check_liveness_file(path: Path) -> None:
    """Check, before the worker starts, that the liveness file can be written (a missing or
    read-only folder is one clear error, not a crash later), without creating it: its
    appearing is the probe's sign that the worker is up, able to take a signal."""
    target = path if path.exists() else path.parent
    problem = None
    if not target.is_dir() and target is path.parent:
        problem = "No such directory"
    elif not os.access(target, os.W_OK):
        problem = "Permission denied or read-only"
    if problem is not None:
        raise ConfigError(f"cannot write the liveness file {path}: {problem}")
