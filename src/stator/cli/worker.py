"""``stator run``: a worker for APP's models, served by the runtime's ``serve``."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from .._console import setup_logging, user_errors
from .._limits import MAX_CONCURRENCY
from .._worker import Worker
from .._worker.serving import EXIT_HUNG, serve, serve_metrics, when_reachable
from ._app import LOG_LEVELS, Seconds, app_command, load_app, split_names

log = logging.getLogger("stator")


@click.command()
@app_command
@click.option("--concurrency", type=click.IntRange(min=1, max=MAX_CONCURRENCY), default=None,
              help=f"Handlers run at once, 1 to {MAX_CONCURRENCY} (default: the Stator's "
                   "setting, 4).")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Most rows claimed in one statement.")
@click.option("--until-idle", is_flag=True,
              help="Exit 0 once nothing runs and nothing is due within --idle-window.")
@click.option("--idle-window", type=Seconds(min=0), default=1.0, show_default=True)
@click.option("--run-for", type=Seconds(min=0, min_open=True), default=None,
              metavar="SECONDS", help="Stop gracefully after this long.")
@click.option("--models", "models", multiple=True, metavar="NAME",
              help="Only these models (table or class names; repeat or comma-separate).")
@click.option("--exclude", multiple=True, metavar="NAME", help="All models but these.")
@click.option("--liveness-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Touched on every heartbeat, for container liveness probes.")
@click.option("--listen-url", metavar="URL",
              help="PostgreSQL behind a pooler: a direct connection for wake-ups.")
@click.option("--log-level", default="INFO", show_default=True, type=LOG_LEVELS)
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Serve the worker's Prometheus metrics on this port (needs the "
                   "dashboard extra).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="Address the metrics port listens on (0.0.0.0: every interface).")
@click.option("--max-hung", type=click.IntRange(min=0, max=MAX_CONCURRENCY), default=None,
              metavar="N",
              help="Handler threads hung past their deadline that are replaced (default: the "
                   f"concurrency); one more and the worker drains and exits {EXIT_HUNG}.")
def run(
    app: str, db: str | None, concurrency: int | None, batch_size: int | None,
    until_idle: bool, idle_window: float, run_for: float | None, models: tuple[str, ...],
    exclude: tuple[str, ...], liveness_file: Path | None, listen_url: str | None,
    log_level: str, metrics_port: int | None, metrics_host: str, max_hung: int | None,
) -> None:
    """Run a worker.  Ctrl-C or SIGTERM once: finish running handlers, hand back the rest,
    exit 0.  A second Ctrl-C or SIGTERM: exit 130 at once (leases expire; nothing is lost)."""
    setup_logging(log_level)
    with user_errors():
        stator = load_app(app, db)
        serve_metrics(metrics_port, metrics_host)
        if batch_size:
            stator.batch_size = batch_size
        if listen_url:
            stator.listen_url = listen_url

        def make_worker() -> Worker:
            return stator.worker(
                concurrency=concurrency, until_idle=until_idle, idle_window=idle_window,
                run_for=run_for, models=split_names(models), exclude=split_names(exclude),
                liveness_file=liveness_file, max_hung=max_hung,
            )

        # A worker that runs until stopped waits for a database that is down at start (a
        # service started before its database); one-off runs fail fast instead.
        found = make_worker() if until_idle else when_reachable(make_worker)
    if found is None:
        log.info("stopped before the database could be reached", extra={"action": "worker_stop"})
        return
    serve(stator, found)
