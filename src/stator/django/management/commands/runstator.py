"""``manage.py runstator``: a Stator worker for the project's StatorModels (Takahē's command,
on the engine ``stator run`` uses).  SIGINT once or SIGTERM: graceful; SIGINT twice: at once."""

from __future__ import annotations

import logging
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand

from ... import _setup

LEVELS = {0: "WARNING", 1: "INFO", 2: "DEBUG", 3: "DEBUG"}


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

    def handle(self, *args: Any, **options: Any) -> None:
        from stator._cli import _setup_logging, fail, serve, serve_metrics, user_errors

        _setup_logging(LEVELS.get(options["verbosity"], "INFO"))
        logging.getLogger("django").setLevel(logging.WARNING)
        for name in ("concurrency", "batch_size"):
            if options[name] is not None and options[name] < 1:
                fail(f"--{name.replace('_', '-')} must be at least 1")
        if options["run_for"] is not None and options["run_for"] <= 0:
            fail("--run-for must be > 0 seconds (leave it out to run until stopped)")
        with user_errors():
            check_or_fail()
            serve_metrics(options["metrics_port"], options["metrics_host"])
            models = select_models(options["labels"], options["exclude"])
            stator = _setup.build_stator(
                models=models, concurrency=options["concurrency"],
                batch_size=options["batch_size"], options={"queues": options["queue"]},
            )
            worker = stator.worker(
                until_idle=options["until_idle"], idle_window=options["idle_window"],
                run_for=options["run_for"], liveness_file=options["liveness_file"],
            )
        serve(stator, worker)


def check_or_fail() -> None:
    """System checks first, so a broken model is one ``error:`` line, not a traceback."""
    from django.core import checks

    from stator._cli import fail

    errors = [m for m in checks.run_checks() if m.is_serious()]
    if errors:
        fail("; ".join(f"{m.id}: {m.msg}" for m in errors))


def select_models(labels: list[str], exclude: list[str]) -> list[type]:
    from stator.errors import ConfigError

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
