"""``manage.py runstator``: a Stator worker for the project's StatorModels (Takahē's command,
on the engine ``stator run`` uses).  SIGINT once or SIGTERM: graceful; SIGINT twice: at once."""

from __future__ import annotations

import atexit
import gc
import logging
import sys
import threading
from argparse import ArgumentParser
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand

LEVELS = {0: "WARNING", 1: "INFO", 2: "DEBUG", 3: "DEBUG"}
# Django's own task lines ("Task id=… path=… state=…"): from -v 2 on, as ``db_worker`` shows
# them; below that only FAILED ones (logged at ERROR).
RELOAD_GRACE = 60.0  # seconds a --reload restart waits for running handlers to finish
TASK_LEVELS = {0: logging.WARNING, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}


class Command(BaseCommand):
    help = "Run a Stator worker for every StatorModel (or the given model labels)."
    requires_system_checks: list[str] = []  # checked below, as one error line

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("labels", nargs="*", metavar="app_label[.Model]",
                            help="Only these models (default: every StatorModel).")
        parser.add_argument("-x", "--exclude", action="append", default=[],
                            metavar="app_label[.Model]", help="All models but these.")
        parser.add_argument("-c", "--concurrency", type=int, default=None,
                            help="Handlers run at once (default: STATOR['CONCURRENCY'], 4).")
        parser.add_argument("--batch-size", type=int, default=None,
                            help="Most rows claimed in one statement.")
        parser.add_argument("-r", "--run-for", type=float, default=None, metavar="SECONDS",
                            help="Stop gracefully after this long.")
        parser.add_argument("--until-idle", action="store_true",
                            help="Exit 0 once nothing runs and nothing is due.")
        parser.add_argument("--idle-window", type=float, default=1.0, metavar="SECONDS")
        parser.add_argument("--liveness-file", type=Path, default=None,
                            help="Touched on every heartbeat.")
        parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                            help="Serve the worker's Prometheus metrics on this port.")
        parser.add_argument("--metrics-host", default="127.0.0.1",
                            help="Address the metrics port listens on (default 127.0.0.1).")
        parser.add_argument("--queue", action="append", default=None, metavar="NAME",
                            help="Task queues to run (repeatable; default: all configured).")
        parser.add_argument("--exclude-queue", action="append", default=None, metavar="NAME",
                            help="Task queues not to run (repeatable).")
        parser.add_argument("--backend", default=None, metavar="ALIAS",
                            help="Only the tasks of this TASKS backend (default: all).")
        parser.add_argument("--max-tasks", type=int, default=None, metavar="N",
                            help="Exit 0 after N tasks (a supervisor starts a fresh worker).")
        parser.add_argument("--worker-id", default=None, metavar="ID",
                            help="This worker's name (unique; default: pid and a random part).")
        parser.add_argument("--reload", action="store_true",
                            help="Restart when code changes (development, as runserver).")
        parser.add_argument("--max-hung", type=int, default=None, metavar="N",
                            help="Handler threads hung past their deadline that are replaced "
                                 "(default: STATOR['MAX_HUNG'], else the concurrency); one "
                                 "more and the worker drains and exits 75.")

    def handle(self, *args: Any, **options: Any) -> None:
        # Django and the project's apps, loaded by now, live as long as the process: set
        # aside from the collector before SQLAlchemy and the engine load (``serve`` freezes
        # what follows), the collections of the start-up no longer scan them.  A full one
        # took 26-35 ms of the 0.9 s of CPU to the first task (issue 21, item 9).  So this
        # module imports the engine (``_setup``) in its functions, not at its top.  Only for
        # ``manage.py runstator``: under ``call_command`` (a test suite's) the process lives
        # on, and what is frozen would never be collected once it became garbage.
        if self.owns_process:
            gc.freeze()
        from stator._console import fail, setup_logging
        from stator._limits import MAX_CONCURRENCY

        setup_logging(LEVELS.get(options["verbosity"], "INFO"))
        for name in ("concurrency", "batch_size", "max_tasks"):
            if options[name] is not None and options[name] < 1:
                fail(f"--{name.replace('_', '-')} must be at least 1")
        if options["max_hung"] is not None and not 0 <= options["max_hung"] <= MAX_CONCURRENCY:
            fail(f"--max-hung must be 0 to {MAX_CONCURRENCY}")
        if options["run_for"] is not None and options["run_for"] <= 0:
            fail("--run-for must be > 0 seconds (leave it out to run until stopped)")
        worker_id = options["worker_id"]
        if worker_id is not None and not (0 < len(worker_id) <= 64 and worker_id.isprintable()):
            fail("--worker-id must be 1 to 64 printable characters")
        if options["reload"]:
            from django.utils import autoreload

            autoreload.run_with_reloader(self._reloaded_run, **options)
            return
        self._run(options, with_signals=True)

    def _run(self, options: dict[str, Any], with_signals: bool) -> None:
        from stator._console import user_errors
        from stator._worker.serving import serve, serve_metrics

        from ... import _setup

        with user_errors():
            check_or_fail()
            backends = None if options["backend"] is None else [task_backend(options["backend"])]
            serve_metrics(options["metrics_port"], options["metrics_host"])
            models = select_models(options["labels"], options["exclude"])
            stator = _setup.build_stator(
                models=models, concurrency=options["concurrency"],
                batch_size=options["batch_size"], options={
                    "queues": options["queue"], "exclude_queues": options["exclude_queue"],
                    "backends": backends,
                },
            )
            worker = stator.worker(
                until_idle=options["until_idle"], idle_window=options["idle_window"],
                run_for=options["run_for"], liveness_file=options["liveness_file"],
                max_tasks=options["max_tasks"], worker_id=options["worker_id"],
                max_hung=_setup.max_hung(options["max_hung"]),
            )
        close_idle_connection(_setup.stator_settings()["DATABASE"])
        with django_log_lines(options["verbosity"]):
            if with_signals:
                serve(stator, worker, freeze=self.owns_process)
                return
            # --reload: this runs off the main thread, which watches the code; a change (or
            # SIGTERM) exits the process, and the worker stops gracefully on the way out.
            served = threading.Event()
            atexit.register(_stop_and_wait, worker, served)
            try:
                serve(stator, worker, with_signals=False, freeze=self.owns_process)
            finally:
                served.set()

    @property
    def owns_process(self) -> bool:
        """Whether this worker is its process's reason to exist (``manage.py runstator``,
        where Django's ``run_from_argv`` marks the command), not ``call_command``'s guest."""
        return bool(getattr(self, "_called_from_command_line", False))

    def _reloaded_run(self, **options: Any) -> None:
        self._run(options, with_signals=False)


def _stop_and_wait(worker: Any, served: threading.Event) -> None:
    """At the exit of a ``--reload`` process: a graceful stop (unstarted rows handed back,
    running ones finished) before the interpreter ends the worker's threads."""
    worker.stop("code changed or stopped (--reload)")
    served.wait(RELOAD_GRACE)


@contextmanager
def django_log_lines(verbosity: int) -> Iterator[None]:
    """Django's own log lines during the run: only warnings and errors, but its task lines
    (``django.tasks``) from ``-v 2`` on, as ``db_worker`` shows them; each printed once.

    They reach the user through this command's handler (the root logger's).  Django's
    default ``console`` handler on the ``django`` logger prints them too when ``DEBUG`` is
    on, so for the run ``django.tasks`` goes to the ``django`` logger's other handlers
    (``mail_admins``, the project's own) and to the root's, not to that one.  Restored after.
    """
    django_log, tasks_log = logging.getLogger("django"), logging.getLogger("django.tasks")
    saved = (django_log.level, tasks_log.level, tasks_log.propagate, list(tasks_log.handlers))
    django_log.setLevel(logging.WARNING)
    tasks_log.setLevel(TASK_LEVELS.get(verbosity, logging.DEBUG))
    if tasks_log.propagate:
        kept = [h for h in django_log.handlers if not _prints_to_console(h)]
        tasks_log.handlers = [*tasks_log.handlers, *kept, *logging.getLogger().handlers]
        tasks_log.propagate = False
    try:
        yield
    finally:
        django_log.level, tasks_log.level, tasks_log.propagate = saved[:3]
        tasks_log.handlers = saved[3]


def _prints_to_console(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.StreamHandler) and handler.stream in (
        sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)


def task_backend(alias: str) -> str:
    """``--backend ALIAS``: a ``TASKS`` entry that uses Stator's backend."""
    from django.conf import settings

    from stator.errors import ConfigError

    from ..._task_options import BACKEND_PATH

    configured = getattr(settings, "TASKS", None) or {}
    ours = sorted(a for a, p in configured.items() if p.get("BACKEND") == BACKEND_PATH)
    if alias not in ours:
        raise ConfigError(f"--backend {alias!r} is not a Stator task backend in settings.TASKS "
                          f"(configured: {', '.join(ours) or 'none'})")
    return alias


def close_idle_connection(alias: str) -> None:
    """The main thread only waits for signals while the worker runs: the connection its
    checks opened would otherwise be one more than CONCURRENCY + 3 for the whole run."""
    from django.db import connections

    conn = connections[alias]
    if not conn.in_atomic_block:  # a caller's transaction (call_command in a test) stays
        conn.close()


def check_or_fail() -> None:
    """System checks first, so a broken model is one ``error:`` line, not a traceback."""
    from django.core import checks

    from stator._console import fail

    errors = [m for m in checks.run_checks() if m.is_serious()]
    if errors:
        fail("; ".join(f"{m.id}: {m.msg}" for m in errors))


def select_models(labels: list[str], exclude: list[str]) -> list[type]:
    from stator.errors import ConfigError

    from ... import _setup

    every = _setup.stator_models()
    if not every:
        raise ConfigError("no StatorModel found in INSTALLED_APPS")

    def matching(label: str) -> list[type]:
        found = [m for m in every if _matches(m, label)]
        if not found:
            known = ", ".join(sorted(_setup.model_label(m) for m in every))
            raise ConfigError(f"no StatorModel matches {label!r} (known: {known})")
        return found

    chosen = [m for label in labels for m in matching(label)] if labels else list(every)
    dropped = {m for label in exclude for m in matching(label)}
    chosen = [m for m in dict.fromkeys(chosen) if m not in dropped]
    if not chosen:
        raise ConfigError("no models left to run after the labels and --exclude")
    return chosen


def _matches(model: Any, label: str) -> bool:
    label = label.lower()
    opts = model._meta
    return label in (opts.label_lower, opts.app_label, opts.db_table.lower())
