"""The ``stator`` command.

``APP`` is ``module:attribute`` naming a ``Stator`` (or a function returning one), found the
way uvicorn and celery find apps: relative to the current directory.  User mistakes (a bad
APP, URL or option, a database not migrated) end with one ``error:`` line naming the fix and
exit code 2; no traceback.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table
from sqlalchemy.exc import DBAPIError

from ._board import ThreadState
from ._stator import Stator
from ._worker import COORDINATOR, RunSummary, Worker
from .errors import ConfigError, StatorError

err = Console(stderr=True)
out = Console()
log = logging.getLogger("stator")


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    sys.exit(code)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn the errors a user can fix into one clear line instead of a traceback."""
    try:
        yield
    except StatorError as exc:
        fail(str(exc))
    except DBAPIError as exc:
        first = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        fail(f"database error: {first}", code=1)


def load_app(app: str, db: str | None) -> Stator:
    """Import ``module:attribute`` and return its Stator, rebound to ``db`` if given."""
    module_name, sep, attr = app.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"APP must look like module:attribute (got {app!r})")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ConfigError(
                f"cannot import {module_name!r} from APP {app!r}: no such module "
                f"(run stator from the directory that contains it, or fix PYTHONPATH)"
            ) from None
        raise
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if callable(target) and not isinstance(target, Stator):
        target = target()
    if not isinstance(target, Stator):
        raise ConfigError(f"{app} is a {type(target).__name__}, not a stator.Stator")
    return target.with_db(db) if db else target


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
    for line in done:
        out.print(f"  {line}", highlight=False)
    out.print(f"{stator.url}: up to date" if done else f"{stator.url}: already up to date",
              highlight=False)


@cli.command()
@app_command
@click.option("--concurrency", type=click.IntRange(min=1), default=None,
              help="Handlers run at once (default: the Stator's setting, 4).")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Most rows claimed in one statement.")
@click.option("--until-idle", is_flag=True,
              help="Exit 0 once nothing runs and nothing is due within --idle-window.")
@click.option("--idle-window", type=click.FloatRange(min=0), default=1.0, show_default=True)
@click.option("--run-for", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="SECONDS", help="Stop gracefully after this long.")
@click.option("--models", "models", multiple=True, metavar="NAME",
              help="Only these models (table or class names; repeat or comma-separate).")
@click.option("--exclude", multiple=True, metavar="NAME", help="All models but these.")
@click.option("--liveness-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Touched on every heartbeat, for container liveness probes.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def run(
    app: str, db: str | None, concurrency: int | None, batch_size: int | None,
    until_idle: bool, idle_window: float, run_for: float | None, models: tuple[str, ...],
    exclude: tuple[str, ...], liveness_file: Path | None, log_level: str,
) -> None:
    """Run a worker.  Ctrl-C or SIGTERM once: finish running handlers, hand back the rest,
    exit 0.  Ctrl-C twice: exit at once (leases expire; nothing is lost)."""
    _setup_logging(log_level)
    with user_errors():
        stator = load_app(app, db)
        if batch_size:
            stator.batch_size = batch_size
        worker = stator.worker(
            concurrency=concurrency, until_idle=until_idle, idle_window=idle_window,
            run_for=run_for, models=_split(models), exclude=_split(exclude),
            liveness_file=liveness_file,
        )
    log.info(
        "worker %s: %s on %s, concurrency %d", worker.id,
        ", ".join(t.name for t in worker.tracked), stator.url, worker.options.concurrency,
        extra={"action": "worker_start"},
    )
    summary = _run_with_signals(worker)
    log.info(
        "worker %s stopped (%s): %d rows processed, %d transitions in %.1fs",
        worker.id, summary.reason, summary.processed, summary.transitions, summary.seconds,
        extra={"action": "worker_stop"},
    )


def _run_with_signals(worker: Worker) -> RunSummary:
    """Run the worker off the main thread; the main thread waits on the worker's board with a
    short timeout (seed 004) so signals, which Python delivers only to it, still arrive."""
    result: list[RunSummary] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(worker.run())
        except BaseException as exc:
            failure.append(exc)
            worker.board.poke()

    interrupts = 0

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1 and signum == signal.SIGINT:
            err.print("forced exit: leases will expire and the rows will be run again")
            os._exit(130)
        log.info("received %s: stopping gracefully (Ctrl-C again to force)",
                 signal.Signals(signum).name, extra={"action": "signal"})
        worker.stop(f"signal {signal.Signals(signum).name}")

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    thread = threading.Thread(target=target, name="stator-coordinator")
    thread.start()
    try:
        while thread.is_alive() and worker.board.state_of(COORDINATOR) != ThreadState.STOPPED:
            worker.board.wait(0.5)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
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
                model["model"], s["state"], s["role"], str(s["rows"]), str(s["due"]),
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
    from ._diagram import to_dot, to_mermaid

    with user_errors():
        stator = load_app(app, db)
    graphs = list(dict.fromkeys(m.state_graph for m in stator.models))  # type: ignore[attr-defined]
    click.echo(to_mermaid(graphs) if fmt == "mermaid" else to_dot(graphs))


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
    handler = RichHandler(console=err, show_path=False, rich_tracebacks=False)
    logging.basicConfig(level=level.upper(), format="%(message)s", handlers=[handler])


@cli.command()
@click.option("--db", metavar="URL", help="PostgreSQL server to measure (a throwaway schema is "
              "used); default: a throwaway SQLite file.")
@click.option("--rows", type=click.IntRange(min=1), default=20_000, show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per scenario.")
def bench(db: str | None, rows: int, concurrency: int, batch_size: int, as_json: bool) -> None:
    """Measure transitions per second of one worker process with no-op handlers."""
    from ._bench import throughput

    with user_errors():
        result = throughput(db, rows, concurrency, batch_size)
    if as_json:
        click.echo(json.dumps(result.as_dict()))
        return
    table = Table(title="stator bench")
    for key in result.as_dict():
        table.add_column(key.replace("_", " "))
    table.add_row(*(str(v) for v in result.as_dict().values()))
    out.print(table)
