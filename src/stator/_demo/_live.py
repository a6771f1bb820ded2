"""Running the demo: its tables made and filled, a worker in a thread until it goes idle,
its progress drawn live meanwhile, Ctrl-C a graceful stop."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text
from sqlalchemy.orm import Session

from .._stator import Stator
from .._worker import RunSummary, Worker
from ._models import IDLE_WINDOW, MODELS, DemoBase, Follower, Inbox, InboxStates, Post, PostStates
from ._remote import FlakyRemote, using
from ._tables import DemoSummary, counts_table, read_counts, summary_table

REFRESH_PER_SECOND = 8
SERVERS = ("kitchen.example", "garden.example", "harbour.example", "attic.example")


@dataclass
class _Run:
    """What the worker thread hands back to the main thread."""

    summary: RunSummary | None = None
    error: BaseException | None = None
    began: float = field(default_factory=time.monotonic)
    ended: float | None = None
    # Waited on instead of Thread.join: on Python 3.11 a join interrupted by Ctrl-C marks
    # the thread finished while it still runs, so the next join would return at once.
    done: threading.Event = field(default_factory=threading.Event)


@contextlib.contextmanager
def _failures_quiet() -> Iterator[None]:
    """The simulated remote fails on purpose and the live table counts its failures: a
    WARNING and a traceback for each would only scroll the table away."""
    failures = logging.getLogger("stator.worker.failures")
    level = failures.level
    failures.setLevel(logging.ERROR)
    try:
        yield
    finally:
        failures.setLevel(level)


def run_demo(
    path: Path,
    *,
    posts: int = 20,
    followers: int = 25,
    failure_rate: float = 0.3,
    concurrency: int = 4,
    console: Console | None = None,
    seed: int = 0,
    latency: float = 0.08,
) -> DemoSummary:
    """Run the demo on the SQLite file at ``path``, show it live, print and return a summary.

    Ctrl-C stops the worker gracefully (rows already started finish, the rest are handed
    back) and the summary is still printed.
    """
    if posts < 1 or followers < 1:
        raise ValueError("posts and followers must be at least 1")
    console = console or Console()
    remote = FlakyRemote(failure_rate, seed=seed, latency=latency)
    stator = Stator(f"sqlite:///{path}", models=list(MODELS), concurrency=concurrency)
    try:
        _prepare(stator, posts, followers)
        with using(remote), _failures_quiet():
            run, interrupted = _run_worker(stator, remote, console, posts, followers)
        summary = _summarise(stator, remote, run, posts, followers, interrupted)
    finally:
        stator.dispose()
    console.print(summary_table(summary))
    _say_what_next(console, path)
    return summary


def _say_what_next(console: Console, path: Path) -> None:
    """Where the demo left its file (in the current directory, unless ``--path`` said
    otherwise), and where a newcomer goes from here."""
    console.print(Text.assemble(
        "The rows are in ", (str(path.resolve()), "bold"),
        " (SQLite; the next `stator demo` replaces them, delete the file when done).\n",
        "What next: ", ("stator demo --failure-rate 0.6", "bold"), " for a rougher remote, ",
        "or the tutorial (docs/tutorial.md) to run a graph of your own: define states, ",
        ("stator migrate", "bold"), ", ", ("stator run", "bold"), ", ",
        ("stator dashboard", "bold"), ".",
    ))


def _prepare(stator: Stator, posts: int, followers: int) -> None:
    DemoBase.metadata.drop_all(stator.engine)
    stator.migrate()
    DemoBase.metadata.create_all(stator.engine)  # the followers table is not Stator's
    with Session(stator.engine) as session:
        session.add_all(
            Follower(handle=f"@reader{n}@{SERVERS[n % len(SERVERS)]}") for n in range(followers)
        )
        session.add_all(
            Post(author="@stator@demo.example", body=f"Hello, world #{n + 1}")
            for n in range(posts)
        )
        session.commit()


def _run_worker(
    stator: Stator, remote: FlakyRemote, console: Console, posts: int, followers: int
) -> tuple[_Run, bool]:
    """Run a worker in a thread until it goes idle, drawing its progress meanwhile."""
    worker = stator.worker(until_idle=True, idle_window=IDLE_WINDOW)
    run = _Run()
    thread = threading.Thread(target=_work, args=(worker, run), name="stator-demo", daemon=True)
    title = f"{posts} posts x {followers} followers, failure rate {remote.failure_rate:.0%}"
    interrupted = False
    thread.start()
    try:
        _watch(stator, remote, run, title, console)
    except KeyboardInterrupt:
        interrupted = True
        console.print(Text("Interrupted: letting running handlers finish...", style="yellow"))
        worker.stop("interrupted")
        run.done.wait()
    thread.join()
    if run.error is not None:
        raise run.error
    return run, interrupted


def _watch(
    stator: Stator, remote: FlakyRemote, run: _Run, title: str, console: Console
) -> None:
    try:
        with Live(console=console, refresh_per_second=REFRESH_PER_SECOND) as live:
            while not run.done.is_set():
                live.update(_progress(stator, remote, run, title))
                run.done.wait(1 / REFRESH_PER_SECOND)
            live.update(_progress(stator, remote, run, title))
    finally:
        if not console.is_terminal:
            console.line()  # Live ends its last frame with a newline only on terminals


def _work(worker: Worker, run: _Run) -> None:
    try:
        run.summary = worker.run()
    except BaseException as exc:  # handed to the main thread, which re-raises it
        run.error = exc
    finally:
        run.ended = time.monotonic()
        run.done.set()


def _progress(stator: Stator, remote: FlakyRemote, run: _Run, title: str) -> Group:
    elapsed = (run.ended or time.monotonic()) - run.began
    table = counts_table(read_counts(stator))
    line = Text.assemble(
        ("remote: ", "bold"), f"{remote.calls} calls, ",
        (f"{remote.failures} failed", "red"), ", ",
        (f"{remote.throttled} throttled", "yellow"), f"   elapsed {elapsed:.1f}s",
    )
    return Group(Text(f"Stator demo: {title}", style="bold"), table, line)


def _summarise(
    stator: Stator, remote: FlakyRemote, run: _Run, posts: int, followers: int,
    interrupted: bool,
) -> DemoSummary:
    counts = read_counts(stator)
    inbox = counts[Inbox.__name__]
    worker = run.summary
    seconds = worker.seconds if worker is not None else (run.ended or time.monotonic()) - run.began
    return DemoSummary(
        posts=posts, followers=followers, inbox_rows=sum(inbox.values()),
        delivered=inbox[InboxStates.delivered.name],
        undeliverable=inbox[InboxStates.undeliverable.name],
        pending=inbox[InboxStates.pending.name],
        posts_done=counts[Post.__name__][PostStates.done.name],
        failed_attempts=_errors(worker), throttled=remote.throttled,
        remote_calls=remote.calls, transitions=worker.transitions if worker else 0,
        seconds=seconds, interrupted=interrupted, counts=counts,
    )


def _errors(summary: RunSummary | None) -> int:
    if summary is None:
        return 0
    return sum(c.errors + c.timeouts for c in summary.counters.values())

