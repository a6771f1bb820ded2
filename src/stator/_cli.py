"""The ``stator`` command.

``APP`` is ``module:attribute`` naming a ``Stator`` (or a function returning one), found the
way uvicorn and celery find apps: relative to the current directory.  User mistakes (a bad
APP, URL or option, a database not migrated) end with one ``error:`` line naming the fix and
exit code 2; no traceback.
"""

from __future__ import annotations

import gc
import importlib
import json
import logging
import math
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table
from rich.text import Text
from sqlalchemy import URL
from sqlalchemy.exc import DBAPIError

from ._board import ThreadState
from ._incurable import is_disk_full
from ._outage import Outage, is_transient
from ._stator import MAX_CONCURRENCY, Stator
from ._worker import COORDINATOR, RunSummary, Worker
from .errors import ConfigError, StatorError

# Markup off: every text printed here may come from users, databases or exceptions, and rich
# would eat anything in it that looks like a tag ("[postgresql]") or die on it ("[/x]").
err = Console(stderr=True, markup=False)
out = Console(markup=False, soft_wrap=True)  # a line piped to a file is not cut at 80
log = logging.getLogger("stator")

# A worker stopped because too many handlers hung (``TOO_MANY_HUNG``): the process must be
# restarted to get their threads and connections back.  EX_TEMPFAIL: "try again".
EXIT_HUNG = 75


class Seconds(click.FloatRange):
    """A number of seconds within a range, and finite: click's own range lets ``nan`` and
    ``inf`` through."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return number


def fail(message: str, code: int = 2) -> NoReturn:
    _error_line(message)
    sys.exit(code)


def _error_line(message: str) -> None:
    err.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False,
              soft_wrap=True)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn the errors a user can fix into one clear line instead of a traceback."""
    try:
        yield
    except StatorError as exc:
        fail(str(exc))
    except DBAPIError as exc:
        first = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        if is_disk_full(exc) or "disk i/o error" in first.lower():
            fail(f"database error: {first}; is the disk that holds the database full "
                 "(df -h) or failing?")
        if exc.statement is None:  # it failed to connect at all
            first += ("; check the database URL (the APP's, or --db) and that the database "
                      "exists and is reachable")
        fail(f"database error: {first}", code=1)


def load_app(app: str, db: str | URL | None) -> Stator:
    """Import ``module:attribute`` and return its Stator, rebound to ``db`` if given."""
    module_name, sep, attr = app.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"APP must look like module:attribute (got {app!r})")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(
                f"cannot import {module_name!r} from APP {app!r}: no such module "
                f"(run stator from the directory that contains it, or fix PYTHONPATH)"
            ) from None
        raise ConfigError(_import_failure(app, module_name, exc)) from None
    except StatorError:
        raise  # an invalid graph or setting in the module: its message names the fix
    except Exception as exc:
        raise ConfigError(_import_failure(app, module_name, exc)) from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if callable(target) and not isinstance(target, Stator):
        target = target()
    if not isinstance(target, Stator):
        raise ConfigError(f"{app} is a {type(target).__name__}, not a stator.Stator")
    stator = target.with_db(db) if db else target
    _dispose_when_done(stator)
    return stator


def _dispose_when_done(stator: Stator) -> None:
    """Close the Stator's pooled connections when the command ends.  A command run in a
    process that goes on (tests, ``main`` called from code) would otherwise leave them to the
    garbage collector, which finds them open at some later, unrelated moment."""
    context = click.get_current_context(silent=True)
    if context is not None:
        context.call_on_close(stator.dispose)


def _import_failure(app: str, module_name: str, exc: Exception) -> str:
    """One line for an APP module that raised while being imported: what and where."""
    text = str(exc).strip().splitlines()
    what = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    where = ""
    if not isinstance(exc, SyntaxError):  # a SyntaxError's text already says where
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if not f.filename.startswith("<")]
        if frames:
            where = f" ({frames[-1].filename}, line {frames[-1].lineno})"
    return (
        f"cannot import APP {app!r}: {what}{where}; fix the module or install what it "
        f"imports (python -c 'import {module_name}' shows the traceback)"
    )


def app_command(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option(
        "--db", metavar="URL", help="Run the same models against another database."
    )(func)
    return click.argument("app")(func)


@click.group()
@click.version_option(package_name="stator-engine")
def cli() -> None:
    """Durable state machines stored in your application's own database."""


def main(args: list[str] | None = None, prog_name: str = "stator") -> None:
    """The console entry point: click's own usage errors get the same single ``error:``
    line as every other user mistake."""
    if not (sys.argv[1:] if args is None else args):
        args = ["--help"]  # a bare `stator` shows what it can do
    try:
        code = cli.main(args=args, prog_name=prog_name, standalone_mode=False)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else prog_name
        fail(f"{exc.format_message()} (see '{where} --help')", exc.exit_code)
    except click.ClickException as exc:
        fail(exc.format_message(), exc.exit_code)
    except click.Abort:
        fail("aborted", 1)
    sys.exit(code if isinstance(code, int) else 0)


@cli.command()
@app_command
def migrate(app: str, db: str | None) -> None:
    """Create or upgrade Stator's tables and the models' Stator columns (idempotent)."""
    with user_errors():
        stator = load_app(app, db)
        done = stator.migrate()
        done.extend(_restart_launcher(stator) if done else [])
    for line in done:
        out.print(f"  {line}", highlight=False)
    out.print(f"{stator.url}: up to date" if done else f"{stator.url}: already up to date",
              highlight=False)


@cli.command()
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
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
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
    _setup_logging(log_level)
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
                run_for=run_for, models=_split(models), exclude=_split(exclude),
                liveness_file=liveness_file, max_hung=max_hung,
            )

        # A worker that runs until stopped waits for a database that is down at start (a
        # service started before its database); one-off runs fail fast instead.
        found = make_worker() if until_idle else _when_reachable(make_worker)
    if found is None:
        log.info("stopped before the database could be reached", extra={"action": "worker_stop"})
        return
    serve(stator, found)


def serve_metrics(port: int | None, host: str = "127.0.0.1") -> None:
    """Serve the worker's Prometheus metrics if a port is given (``stator run`` and
    ``manage.py runstator``); without one, metrics cost nothing (see ``_metrics``)."""
    if port is None:
        return
    from . import _metrics

    _metrics.serve(port, host)
    log.info("metrics on http://%s:%d/metrics", host, port, extra={"action": "metrics_start"})


def serve(stator: Stator, worker: Worker, with_signals: bool = True) -> RunSummary:
    """Run a worker until it stops, logging its start and end (``stator run``, and Django's
    ``manage.py runstator``).  ``with_signals=False`` off the main thread (``--reload``)."""
    log.info(
        "worker %s: %s on %s, concurrency %d", worker.id,
        ", ".join(t.name for t in worker.tracked), stator.url, worker.options.concurrency,
        extra={"action": "worker_start"},
    )
    # Everything made so far (modules: Django's, SQLAlchemy's, the app's) lives as long as
    # the process: set aside from the collector, it is not scanned by every full collection,
    # nor at exit (where scanning it took over a second on a busy 2-core machine).
    gc.freeze()
    summary = _run_with_signals(worker, with_signals)
    log.info(
        "worker %s stopped (%s): %d rows processed, %d transitions in %.1fs",
        worker.id, summary.reason, summary.processed, summary.transitions, summary.seconds,
        extra={"action": "worker_stop"},
    )
    exit_if_hung(worker, summary)
    return summary


def exit_if_hung(worker: Worker, summary: RunSummary) -> None:
    """A run stopped by too many hung handlers ends its process with ``EXIT_HUNG`` and one
    line saying why, so that a supervisor (systemd, Kubernetes, the launcher) restarts it."""
    if not summary.needs_restart:
        return
    message = (f"stopped: more than {worker.options.hung_cap} handler threads hung past their "
               f"deadlines (--max-hung), {summary.hung} still running; exit {EXIT_HUNG} so that "
               "the process is restarted (only a new one frees their threads and connections)")
    if threading.current_thread() is not threading.main_thread():
        # runstator --reload serves off the main thread, where sys.exit would end only this
        # thread and leave the process up without a worker; the worker has drained already.
        _error_line(message)
        os._exit(EXIT_HUNG)
    fail(message, EXIT_HUNG)


def _force_exit(message: str) -> NoReturn:
    err.print(message, highlight=False)
    os._exit(130)


@contextmanager
def stop_signals(stop: Callable[[str], None], forced: str) -> Iterator[None]:
    """SIGINT or SIGTERM once: ``stop`` gracefully.  A second one of either: exit 130 at
    once, printing ``forced``.  The previous handlers are restored afterwards."""
    received = 0

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal received
        received += 1
        name = signal.Signals(signum).name
        if received > 1:
            _force_exit(forced)
        log.info("received %s: stopping gracefully (Ctrl-C or SIGTERM again to force)", name,
                 extra={"action": "signal"})
        stop(f"signal {name}")

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _when_reachable(make: Callable[[], Worker]) -> Worker | None:
    """``make()`` once the database can be reached: a line when it cannot, one a minute
    while it stays so, backoff in between; None if SIGINT or SIGTERM came first."""
    outage = Outage("stator run", remind_every=60.0)
    stopped = threading.Event()
    with stop_signals(lambda _reason: stopped.set(), "forced exit"):
        while True:
            try:
                made = make()
            except DBAPIError as exc:
                if not is_transient(exc):
                    raise
                if stopped.wait(outage.failed(exc)):
                    return None
                continue
            outage.recovered()
            return made


def _run_with_signals(worker: Worker, with_signals: bool = True) -> RunSummary:
    """Run the worker off the main thread; the main thread waits on the worker's board with a
    short timeout (HarvestMan's design) so signals, which Python delivers only to it, still
    arrive."""
    result: list[RunSummary] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(worker.run())
        except BaseException as exc:
            failure.append(exc)
            worker.board.poke()
        finally:
            worker.store.thread_done()

    forced = "forced exit: leases will expire and the rows will be run again"
    with stop_signals(worker.stop, forced) if with_signals else nullcontext():
        thread = threading.Thread(target=target, name="stator-coordinator")
        thread.start()
        while thread.is_alive() and worker.board.state_of(COORDINATOR) != ThreadState.STOPPED:
            worker.board.wait(0.5)
    thread.join()
    if failure:
        exc = failure[0]
        if isinstance(exc, StatorError):
            fail(str(exc))
        raise exc
    return result[0]


@cli.command()
@app_command
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(app: str, db: str | None, as_json: bool) -> None:
    """Rows per model and state, what is due, recent throughput and errors, live workers."""
    with user_errors():
        report = load_app(app, db).status()
    print_status(report, as_json)


def print_status(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
        return
    _print_status(report)


def _print_status(report: dict[str, Any]) -> None:
    table = Table(title=f"Stator status — {report['database']}", title_justify="left")
    for column in ("model", "state", "role", "rows", "due", "oldest due", "failing"):
        numeric = column in ("rows", "due", "failing")
        table.add_column(column, justify="right" if numeric else "left")
    for model in report["models"]:
        for s in model["states"] or [{"state": "(empty)", "role": "", "rows": 0, "due": 0,
                                      "oldest_due_seconds": None, "failing": 0}]:
            age = s["oldest_due_seconds"]
            table.add_row(
                model["model"], s["state"], s["role"],
                ("≈" if s.get("estimated") else "") + str(s["rows"]), str(s["due"]),
                "" if age is None else f"{age:.1f}s", str(s["failing"]),
            )
    out.print(table)
    for model in report["models"]:
        recent = model["recent"]
        if recent:
            out.print(
                f"{model['model']}: last 5 min {recent['processed']} processed, "
                f"{recent['transitions']} transitions, {recent['errors']} errors, "
                f"{recent['timeouts']} timeouts, max lag {recent['max_lag']:.1f}s",
                highlight=False,
            )
    live = [w for w in report["workers"] if w["alive"]]
    out.print(f"workers alive: {len(live)}", highlight=False)
    for w in live:
        out.print(f"  {w['id']} on {w['hostname']} pid {w['pid']}, concurrency "
                  f"{w['concurrency']}, last seen {w['last_seen']}", highlight=False)
    if report["errors"]:
        out.print("recent errors:")
        for e in report["errors"][:10]:
            out.print(f"  {e['created_at']} {e['model']} {e['row_pk']} in {e['state']} "
                      f"(attempt {e['attempt']}, {e['kind']}): {e['message']}", highlight=False)


@cli.command()
@app_command
@click.option("--format", "fmt", type=click.Choice(["mermaid", "dot"]), default="mermaid",
              show_default=True)
def graph(app: str, db: str | None, fmt: str) -> None:
    """Print the state graphs as a Mermaid or Graphviz diagram."""
    with user_errors():
        stator = load_app(app, db)
    print_graphs(stator, fmt)


def print_graphs(stator: Stator, fmt: str) -> None:
    from ._graph_text import to_dot, to_mermaid

    graphs = list(dict.fromkeys(m.state_graph for m in stator.models))  # type: ignore[attr-defined]
    click.echo(to_mermaid(graphs) if fmt == "mermaid" else to_dot(graphs))


# -- the launcher (stator._launcher) ----------------------------------------------------------


def _restart_launcher(stator: Stator) -> list[str]:
    """After a migration: tell the launcher (as TimescaleDB's CREATE/ALTER EXTENSION send restart),
    so a scheduler disabled for lack of schema starts, and a running one picks up the new
    schema.  A failure here does not undo the migration; it is reported."""
    from ._launcher import send_message
    from ._launcher._discovery import key_of
    from ._launcher._place import DEFAULT_PLACE, poke

    try:
        sent = send_message(stator.engine, "restart")
    except (DBAPIError, StatorError) as exc:
        return [f"could not send restart to the launcher: {exc}"]
    if poke(DEFAULT_PLACE, key_of(stator.engine.url)):
        return [f"sent restart to the launcher (message {sent.id})"]
    return [f"left restart message {sent.id} for a launcher (none runs from this directory; "
            "one running elsewhere acts on it)"]


def _control_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--control", type=click.Path(file_okay=False, path_type=Path),
        default=Path(".stator-launcher"), show_default=True,
        help="The launcher's control place (lock, state file, logs), relative to the "
             "current directory.",
    )(func)


@cli.command()
@click.argument("app")
@click.option("--discover", multiple=True, metavar="PATTERN",
              help="Databases to find on every wake-up: postgresql://host/ (every database "
                   "that allows connections; a glob after the slash filters names) or "
                   "'sqlite:///tenants/*.db'.  Repeatable.")
@click.option("--db", "databases", multiple=True, metavar="URL",
              help="One more database to run.  Repeatable.")
@click.option("--max-workers", type=click.IntRange(min=2), default=4, show_default=True,
              help="Worker slots: the launcher holds one, each running scheduler one.")
@_control_option
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
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def launcher(
    app: str, discover: tuple[str, ...], databases: tuple[str, ...], max_workers: int,
    control: Path, discover_every: float, poll_every: float, idle_window: float,
    slice_seconds: float, stop_grace: float, backoff_floor: float, backoff_max: float,
    listen_max: int, concurrency: int | None, log_level: str,
) -> None:
    """Run one scheduler per database, within --max-workers slots.  Ctrl-C or SIGTERM:
    stop every scheduler gracefully and exit; a second one: exit 130 at once."""
    from ._launcher import Launcher, LauncherOptions

    _setup_logging(log_level)
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


@cli.command()
@click.argument("message", type=click.Choice(["start", "stop", "restart"]))
@click.argument("database_url")
@click.option("--wait", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Wait this long for the launcher's acknowledgement (exit 1 without one).")
@_control_option
def ctl(message: str, database_url: str, wait: float | None, control: Path) -> None:
    """Send start, stop or restart to the launcher running DATABASE_URL."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from ._launcher import send_message
    from ._launcher._discovery import Target, normalize
    from ._launcher._place import poke

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


@cli.command("launcher-status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@_control_option
def launcher_status(as_json: bool, control: Path) -> None:
    """Each database of the launcher on --control: state, slot, scheduler pid, uptime,
    restarts, last error.  Exit code 1 if no launcher is running there."""
    from ._launcher._report import NoLauncherState, render, status_report

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


@cli.command("launcher-scheduler", hidden=True)
@click.argument("app")
@click.option("--idle-window", type=click.FloatRange(min=0), default=5.0)
@click.option("--lifeline", type=int, default=None)
@click.option("--after-message", type=int, default=None)
@click.option("--concurrency", type=click.IntRange(min=1, max=MAX_CONCURRENCY), default=None)
@click.option("--log-level", default="INFO",
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def launcher_scheduler(
    app: str, idle_window: float, lifeline: int | None, after_message: int | None,
    concurrency: int | None, log_level: str,
) -> None:
    """One database's scheduler, started by `stator launcher`: exit 3 at once without a
    Stator schema; otherwise a worker until nothing is due within --idle-window (exit 0).
    The launcher passes the URL's parts in STATOR_SCHEDULER_DB, so no command line shows
    it and no URL text is parsed again (see ``_launcher._children``)."""
    from ._launcher._children import EXIT_NO_SCHEMA
    from ._launcher._scheduler import follow_sender, watch_lifeline
    from .errors import SchemaError

    _setup_logging(log_level)
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
    summary = _run_with_signals(worker)
    log.info("scheduler %s stopped (%s): %d rows processed, %d transitions in %.1fs",
             worker.id, summary.reason, summary.processed, summary.transitions,
             summary.seconds, extra={"action": "scheduler_stop"})
    exit_if_hung(worker, summary)


def _scheduler_url() -> URL:
    """The database the launcher gave this scheduler, taken out of the environment so that
    nothing the handlers start inherits its password."""
    from ._launcher._children import URL_VARIABLE, url_from_parts

    parts = os.environ.pop(URL_VARIABLE, None)
    if parts is None:
        raise ConfigError(f"launcher-scheduler is started by `stator launcher` (no {URL_VARIABLE})")
    try:
        return url_from_parts(parts)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{URL_VARIABLE} does not hold a database URL's parts ({exc})") from None


@cli.command()
@app_command
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def uninstall(app: str, db: str | None, yes: bool) -> None:
    """Drop Stator's own tables (schema version, workers, stats, errors) and tell the
    launcher (restart: its scheduler then finds no schema and is disabled).  Your tables and
    their state columns stay."""
    with user_errors():
        stator = load_app(app, db)
        if not yes:
            click.confirm(f"drop Stator's tables from {stator.url}?", abort=True)
        done = stator.uninstall()
    for line in done:
        out.print(f"  {line}", highlight=False)
    out.print(f"{stator.url}: Stator's tables removed" if done else
              f"{stator.url}: nothing to remove", highlight=False)


@cli.command()
@click.option("--path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("stator-demo.db"), show_default=True,
              help="SQLite file to use (the demo's own tables in it are replaced).")
@click.option("--posts", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--followers", type=click.IntRange(min=1), default=25, show_default=True)
@click.option("--failure-rate", type=click.FloatRange(0, 0.95), default=0.3, show_default=True,
              help="Share of deliveries the simulated remote server fails.")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True)
def demo(path: Path, posts: int, followers: int, failure_rate: float, concurrency: int) -> None:
    """Fan posts out to followers' inboxes through a flaky simulated remote, live."""
    from ._demo import run_demo

    with user_errors():
        run_demo(path, posts=posts, followers=followers, failure_rate=failure_rate,
                 concurrency=concurrency, console=out)


def _split(values: tuple[str, ...]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def _setup_logging(level: str) -> None:
    """Rich's columns on a terminal; plain lines (no wrapping, no padding) in log files."""
    handler: logging.Handler
    if err.is_terminal:
        handler = RichHandler(console=err, show_path=False, rich_tracebacks=False)
        logging.basicConfig(level=level.upper(), format="%(message)s", handlers=[handler])
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%d %H:%M:%S"))
        logging.basicConfig(level=level.upper(), handlers=[handler])


@cli.command()
@click.option("--db", metavar="URL", help="PostgreSQL server to measure (a throwaway database "
              "per scenario, dropped afterwards); default: throwaway SQLite files.")
@click.option("--scenario", "scenarios", multiple=True, metavar="NAME",
              help="Run only this scenario (repeat or comma-separate; default: all of "
              "throughput, limit, latency, scale, idle, memory, fanout).")
@click.option("--quick", is_flag=True, help="Small sizes (a few minutes): for CI and a first look.")
@click.option("--rows", type=click.IntRange(min=1), default=None,
              help="Rows through the graph in throughput and limit [default: 20000; quick: 2000].")
@click.option("--processes", metavar="N,N,…",
              help="Worker process counts for throughput [default: 1,2,4; quick: 1,2].")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per result line.")
def bench(
    db: str | None, scenarios: tuple[str, ...], quick: bool, rows: int | None,
    processes: str | None, concurrency: int, batch_size: int, as_json: bool,
) -> None:
    """Measure Stator on a real database: throughput, the database's own limit, latency,
    scale, idle cost, memory and fan-out."""
    from ._bench import Sizes, run_bench

    with user_errors():
        sizes = (Sizes.quick() if quick else Sizes()).with_rows(rows)
        sizes = sizes.with_processes(_process_counts(processes))
        results = run_bench(
            db, _split(scenarios), sizes, concurrency=concurrency, batch_size=batch_size,
            progress=lambda message: err.print(Text(message, style="dim"), highlight=False),
        )
        shown: list[dict[str, Any]] = []
        for line in results:
            if as_json:
                click.echo(json.dumps(line))
                continue
            if shown and shown[-1]["scenario"] != line["scenario"]:
                out.print(_bench_table(shown))
                shown = []
            shown.append(line)
        if shown:
            out.print(_bench_table(shown))


def _process_counts(value: str | None) -> tuple[int, ...] | None:
    if not value:
        return None
    try:
        counts = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"--processes takes numbers like 1,2,4 (got {value!r})") from None
    if not counts or min(counts) < 1:
        raise ConfigError(f"--processes takes numbers of at least 1 (got {value!r})")
    return counts


BENCH_LABELS = {"throughput": "processes", "limit": "batch_size", "latency": "mode",
                "scale": "table_rows"}


def _bench_table(lines: list[dict[str, Any]]) -> Table:
    """One scenario's results as a table: a row per figure, a column per result (the
    figures are many and the results few, so this way round fits a terminal)."""
    scenario = lines[0]["scenario"]
    label = BENCH_LABELS.get(scenario)
    table = Table(title=f"stator bench: {scenario} ({lines[0]['backend']})",
                  title_justify="left")
    table.add_column("")
    for line in lines:
        heading = f"{label.replace('_', ' ')} {_bench_cell(line[label])}" if label else scenario
        if "loop" in line:  # limit: the minimal loop or Stator's own statements
            heading = f"{line['loop']}, {heading}"
        table.add_column(heading, justify="right")
    skip = {"scenario", "backend", "loop", label}
    keys = [k for k in lines[0] if k not in skip and not isinstance(lines[0][k], list)]
    for key in keys:
        table.add_row(key.replace("_", " "), *(_bench_cell(line.get(key)) for line in lines))
    return table


def _bench_cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.2f}" if abs(value) >= 1 else f"{value:.4f}"
    return str(value)


# -- the dashboard (stator.dashboard) ---------------------------------------------------------

_MIN_TOKEN = 16  # characters (not counting spaces) of a token guarding a non-loopback address


@cli.command()
@app_command
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback needs --token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--token", envvar="STATOR_DASHBOARD_TOKEN", default=None,
              help="Every page then needs it (sign in, or Authorization: Bearer), and actions "
                   "(retry, move, pause) are enabled; also from STATOR_DASHBOARD_TOKEN. "
                   "Without it the dashboard is open and read-only (loopback only).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A Host name the dashboard answers to besides localhost, IP addresses "
                   "and --host (e.g. the name a reverse proxy forwards); repeatable.")
@click.option("--public-metrics", is_flag=True,
              help="Serve /metrics without the token (for a Prometheus without credentials).")
@click.option("--trusted-proxy", "trusted_proxies", multiple=True, metavar="ADDRESS",
              help="The address of a reverse proxy whose X-Forwarded-For/-Proto are believed "
                   "(for wrong-token waits and the action log); repeatable. Without it "
                   "those headers are ignored.")
@_control_option
@click.option("--log-level", default="WARNING", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def dashboard(
    app: str, db: str | None, host: str, port: int, token: str | None,
    allowed_hosts: tuple[str, ...], public_metrics: bool, trusted_proxies: tuple[str, ...],
    control: Path, log_level: str,
) -> None:
    """Serve a web dashboard (and /metrics) for APP's models."""
    _setup_logging(log_level)
    serve_dashboard(lambda: load_app(app, db), host, port, token, control, log_level,
                    allowed_hosts=allowed_hosts, public_metrics=public_metrics,
                    trusted_proxies=trusted_proxies)


def serve_dashboard(
    make: Callable[[], Stator], host: str, port: int, token: str | None, control: Path | None,
    log_level: str = "WARNING", *, allowed_hosts: Iterable[str] = (),
    public_metrics: bool = False, trusted_proxies: Iterable[str] = (),
) -> None:
    """Check, bind and serve the dashboard (``stator dashboard``, ``manage.py stator
    dashboard``): every mistake is one ``error:`` line, exit 2."""
    with user_errors():
        if not token and not _is_loopback(host):
            raise ConfigError(
                f"refusing to serve the dashboard on {host} without a token: anyone who can "
                "reach it could read your rows; pass --token (or STATOR_DASHBOARD_TOKEN), "
                "or use --host 127.0.0.1"
            )
        if token and not _is_loopback(host) and len(token.strip()) < _MIN_TOKEN:
            raise ConfigError(
                f"refusing to serve the dashboard on {host} with a token of fewer than "
                f"{_MIN_TOKEN} characters (not counting spaces): it could be guessed; "
                "use a long random one, e.g. python -c 'import secrets; "
                "print(secrets.token_urlsafe())'"
            )
        for proxy in trusted_proxies:
            _check_network(proxy, "--trusted-proxy")
        try:
            import uvicorn

            from .dashboard import create_app
        except ImportError as exc:
            raise ConfigError(f"the dashboard needs its extra ({exc.name} is missing): "
                              "pip install 'stator-engine[dashboard]'") from None
        stator = make()
        stator.check()
        sock = _listen(host, port)
        web = create_app(stator, token=token or None, launcher_control=control,
                         allowed_hosts=[host, *allowed_hosts], public_metrics=public_metrics)
    out.print(f"Stator dashboard on http://{host}:{sock.getsockname()[1]}/ "
              f"({'sign in with the token; actions enabled' if token else 'read-only'})",
              highlight=False)
    # uvicorn believes X-Forwarded-For from 127.0.0.1 unless told otherwise: any local user
    # could then pick a new address per wrong token (no wait) and the action log's "from".
    proxies = list(trusted_proxies)
    config = uvicorn.Config(web, log_level=log_level.lower(), access_log=False,
                            proxy_headers=bool(proxies), forwarded_allow_ips=proxies or None)
    uvicorn.Server(config).run(sockets=[sock])


def _check_network(value: str, option: str) -> None:
    import ipaddress

    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ConfigError(f"{option} {value!r} is not an IP address or network") from None


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listen(host: str, port: int) -> Any:
    """A listening socket on host:port, bound here so a port in use is one error line."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
