"""The launcher's commands: ``stator launcher`` runs one scheduler per database,
``stator ctl`` sends it a message, ``stator launcher-status`` reads its state file, and the
hidden ``launcher-scheduler`` is the scheduler process it starts."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import click
from sqlalchemy import URL

from .._console import fail, out, setup_logging, user_errors
from .._limits import MAX_CONCURRENCY
from .._worker.serving import exit_if_hung, run_with_signals, stop_signals
from ..errors import ConfigError
from ._app import LOG_LEVELS, control_option, load_app

log = logging.getLogger("stator")


@click.command()
@click.argument("app")
@click.option("--discover", multiple=True, metavar="PATTERN",
              help="Databases to find on every wake-up: postgresql://host/ (every database "
                   "that allows connections; a glob after the slash filters names) or "
                   "'sqlite:///tenants/*.db'.  Repeatable.")
@click.option("--db", "databases", multiple=True, metavar="URL",
              help="One more database to run.  Repeatable.")
@click.option("--max-workers", type=click.IntRange(min=2), default=4, show_default=True,
              help="Worker slots: the launcher holds one, each running scheduler one.")
@control_option
@click.option("--discover-every", type=click.FloatRange(min=0.05), default=10.0,
              show_default=True, metavar="SECONDS",
              help="Wake up at least this often to rediscover, and to read every database's "
                   "messages and next due time.")
@click.option("--poll-every", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              metavar="SECONDS", help="Check SQLite files for commits (a stat per file); "
              "discovery runs at most this often.")
@click.option("--idle-window", type=click.FloatRange(min=0), default=5.0, show_default=True,
              metavar="SECONDS",
              help="A scheduler exits, handing its slot back, once nothing is due this soon.")
@click.option("--slice", "slice_seconds", type=click.FloatRange(min=0), default=60.0,
              show_default=True, metavar="SECONDS",
              help="A scheduler that has run this long yields its slot to a waiting database.")
@click.option("--stop-grace", type=click.FloatRange(min=0), default=10.0, show_default=True,
              metavar="SECONDS", help="How long a stopping scheduler may take before SIGKILL.")
@click.option("--backoff-floor", type=click.FloatRange(min=0), default=5.0, show_default=True,
              metavar="SECONDS", help="Least wait before regenerating a crashed scheduler.")
@click.option("--backoff-max", type=click.FloatRange(min=0), default=300.0, show_default=True,
              metavar="SECONDS", help="Most wait before regenerating a crashed scheduler.")
@click.option("--listen-max", type=click.IntRange(min=0), default=32, show_default=True,
              help="PostgreSQL databases to LISTEN on (one connection each); the rest are "
                   "read every --discover-every.")
@click.option("--concurrency", type=click.IntRange(min=1, max=MAX_CONCURRENCY), default=None,
              help=f"Each scheduler's handler concurrency, 1 to {MAX_CONCURRENCY} (default: "
                   "the Stator's setting).")
@click.option("--log-level", default="INFO", show_default=True, type=LOG_LEVELS)
def launcher(
    app: str, discover: tuple[str, ...], databases: tuple[str, ...], max_workers: int,
    control: Path, discover_every: float, poll_every: float, idle_window: float,
    slice_seconds: float, stop_grace: float, backoff_floor: float, backoff_max: float,
    listen_max: int, concurrency: int | None, log_level: str,
) -> None:
    """Run one scheduler per database, within --max-workers slots.  Ctrl-C or SIGTERM:
    stop every scheduler gracefully and exit; a second one: exit 130 at once."""
    from .._launcher import Launcher, LauncherOptions

    setup_logging(log_level)
    with user_errors():
        stator = load_app(app, None)
        the_launcher = Launcher(LauncherOptions(
            app=app, discover=discover, databases=databases, max_workers=max_workers,
            control=control, discover_every=discover_every, poll_every=poll_every,
            idle_window=idle_window, slice=slice_seconds, stop_grace=stop_grace,
            backoff_floor=backoff_floor, backoff_max=backoff_max, listen_max=listen_max,
            concurrency=concurrency, log_level=log_level.upper(),
        ), stator.models)
        forced = "forced exit: each scheduler stops by itself once the launcher is gone"
        with stop_signals(the_launcher.stop, forced):
            the_launcher.run()
    log.info("launcher stopped", extra={"action": "launcher_stop"})


@click.command()
@click.argument("message", type=click.Choice(["start", "stop", "restart"]))
@click.argument("database_url")
@click.option("--wait", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Wait this long for the launcher's acknowledgement (exit 1 without one).")
@control_option
def ctl(message: str, database_url: str, wait: float | None, control: Path) -> None:
    """Send start, stop or restart to the launcher running DATABASE_URL."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from .._launcher import send_message
    from .._launcher._discovery import Target, normalize
    from .._launcher._place import poke

    with user_errors():
        target = Target.of(normalize(database_url))
        if target.path is not None and not target.path.is_file():
            raise ConfigError(f"no SQLite database at {target.path}")
        engine = create_engine(target.url, poolclass=NullPool)
        try:
            sent = send_message(engine, message)
        finally:
            engine.dispose()
    poke(control, target.key)
    out.print(f"sent {message} to {target.key} (message {sent.id})", highlight=False)
    if wait is None:
        return
    reply = sent.reply(wait)
    if reply is None:
        out.print(f"no acknowledgement within {wait:g}s (is a launcher running for this "
                  "database?)", highlight=False)
        sys.exit(1)
    out.print(f"{'acknowledged' if reply.ok else 'refused'}: {reply.outcome}", highlight=False)
    if not reply.ok:
        sys.exit(1)


@click.command("launcher-status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@control_option
def launcher_status(as_json: bool, control: Path) -> None:
    """Each database of the launcher on --control: state, slot, scheduler pid, uptime,
    restarts, last error.  Exit code 1 if no launcher is running there."""
    from .._launcher._report import NoLauncherState, render, status_report

    with user_errors():
        try:
            report = status_report(control)
        except NoLauncherState as exc:
            fail(str(exc), 1)  # no launcher running there: the documented exit code
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        render(report, out)
    if not report["launcher"]["running"]:
        sys.exit(1)


@click.command("launcher-scheduler", hidden=True)
@click.argument("app")
@click.option("--idle-window", type=click.FloatRange(min=0), default=5.0)
@click.option("--lifeline", type=int, default=None)
@click.option("--after-message", type=int, default=None)
@click.option("--concurrency", type=click.IntRange(min=1, max=MAX_CONCURRENCY), default=None)
@click.option("--log-level", default="INFO", type=LOG_LEVELS)
def launcher_scheduler(
    app: str, idle_window: float, lifeline: int | None, after_message: int | None,
    concurrency: int | None, log_level: str,
) -> None:
    """One database's scheduler, started by `stator launcher`: exit 3 at once without a
    Stator schema; otherwise a worker until nothing is due within --idle-window (exit 0).
    The launcher passes the URL's parts in STATOR_SCHEDULER_DB, so no command line shows
    it and no URL text is parsed again (see ``_launcher._children``)."""
    from .._launcher._children import EXIT_NO_SCHEMA
    from .._launcher._scheduler import follow_sender, watch_lifeline
    from ..errors import SchemaError

    setup_logging(log_level)
    with user_errors():
        stator = load_app(app, _scheduler_url())
        if after_message is not None and not follow_sender(stator.engine, after_message):
            log.warning("message %d is not visible here yet; going on", after_message)
        problems = stator.store.problems()
        if problems:
            fail("; ".join(problems), EXIT_NO_SCHEMA)
        try:
            worker = stator.worker(concurrency=concurrency, until_idle=True,
                                   idle_window=idle_window)
        except SchemaError as exc:
            fail(str(exc), EXIT_NO_SCHEMA)
    if lifeline is not None:
        watch_lifeline(lifeline, lambda: worker.stop("launcher gone"))
    log.info("scheduler %s for %s", worker.id, stator.url, extra={"action": "scheduler_start"})
    summary = run_with_signals(worker)
    log.info("scheduler %s stopped (%s): %d rows processed, %d transitions in %.1fs",
             worker.id, summary.reason, summary.processed, summary.transitions,
             summary.seconds, extra={"action": "scheduler_stop"})
    exit_if_hung(worker, summary)


def _scheduler_url() -> URL:
    """The database the launcher gave this scheduler, taken out of the environment so that
    nothing the handlers start inherits its password."""
    from .._launcher._children import URL_VARIABLE, url_from_parts

    parts = os.environ.pop(URL_VARIABLE, None)
    if parts is None:
        raise ConfigError(f"launcher-scheduler is started by `stator launcher` (no {URL_VARIABLE})")
    try:
        return url_from_parts(parts)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{URL_VARIABLE} does not hold a database URL's parts ({exc})") from None
