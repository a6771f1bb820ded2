"""``stator demo``: a tiny social network run by a real worker on a throwaway SQLite file.

It exists to show, in half a minute and without any setup, what Stator is for: a handler
that writes rows of its own atomically with its transition (a post fanning out to one inbox
row per follower), a handler that talks to an unreliable remote server (retries with
backoff, ``TryAgainLater``, giving up into a ``fails_to`` state), and a worker that stops by
itself once nothing is left to do.  Everything runs through the public API, so this module
doubles as an end-to-end check of it.

The demo's tables are prefixed ``demo_`` and dropped at the start of every run, so the file
can be reused; nothing else in it is touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.bar import Bar
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text
from sqlalchemy import Connection, ForeignKey, String, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from ._graph import State, StateGraph
from ._stator import Stator
from ._worker import RunSummary, Worker
from .errors import TryAgainLater
from .sqlalchemy import StatorMixin

# Retry timings are far below Stator's defaults so the demo finishes in seconds.  The
# longest wait a row can be given (max_retry_after plus jitter, THROTTLE_DELAY) must stay
# under IDLE_WINDOW, or the until-idle worker would stop with rows still waiting.
RETRY_AFTER = 0.25
MAX_RETRY_AFTER = 0.8
MAX_ATTEMPTS = 4
THROTTLE_DELAY = 0.5
THROTTLE_SHARE = 0.2  # of failure_rate: how often the remote says "slow down" instead
POLL_AFTER = 0.3  # how often a fanned-out post checks whether its deliveries settled
IDLE_WINDOW = 1.0
REFRESH_PER_SECOND = 8
SERVERS = ("kitchen.example", "garden.example", "harbour.example", "attic.example")


class RemoteError(Exception):
    """The simulated server refused a delivery; Stator retries it with backoff."""


# -- the models and their graphs -----------------------------------------------------------


class DemoBase(DeclarativeBase):
    """The demo's own metadata, so creating and dropping its tables touches nothing else."""


class PostStates(StateGraph):
    """A post is fanned out to its followers' inboxes, then waits for the deliveries."""

    new = State(retry_after=RETRY_AFTER, timeout=10)
    fanned_out = State(retry_after=POLL_AFTER)
    done = State()

    new.transitions_to(fanned_out)
    fanned_out.transitions_to(done)

    @classmethod
    def check_new(cls, post: Post) -> State:
        # The inbox rows go into the session Stator gave the handler, so they are committed
        # in the same transaction as the move to fanned_out: a crash can never leave a post
        # fanned out to half its followers, or fan it out twice.
        session = _session_of(post)
        followers = session.scalars(select(Follower.handle).order_by(Follower.id))
        session.add_all(Inbox(post_id=post.id, follower=handle) for handle in followers)
        return cls.fanned_out

    @classmethod
    def check_fanned_out(cls, post: Post) -> State | None:
        session = _session_of(post)
        waiting = session.scalar(
            select(func.count()).select_from(Inbox).where(
                Inbox.post_id == post.id, Inbox.state == InboxStates.pending.name
            )
        )
        return cls.done if waiting == 0 else None  # None: look again after retry_after


class InboxStates(StateGraph):
    """One delivery of one post to one follower's (unreliable) server."""

    pending = State(
        retry_after=RETRY_AFTER, max_retry_after=MAX_RETRY_AFTER, max_attempts=MAX_ATTEMPTS,
        timeout=5,
    )
    delivered = State()
    undeliverable = State()

    pending.transitions_to(delivered)
    pending.fails_to(undeliverable)

    @classmethod
    async def check_pending(cls, inbox: Inbox) -> State:
        await _remote().deliver(inbox.follower)
        return cls.delivered


class Follower(DemoBase):
    __tablename__ = "demo_followers"

    id: Mapped[int] = mapped_column(primary_key=True)
    handle: Mapped[str] = mapped_column(String(200))


class Post(StatorMixin, DemoBase):
    __tablename__ = "demo_posts"
    state_graph = PostStates

    id: Mapped[int] = mapped_column(primary_key=True)
    author: Mapped[str] = mapped_column(String(200))
    body: Mapped[str] = mapped_column(String(500))


class Inbox(StatorMixin, DemoBase):
    __tablename__ = "demo_inbox"
    state_graph = InboxStates

    id: Mapped[int] = mapped_column(primary_key=True)
    post_id: Mapped[int] = mapped_column(ForeignKey("demo_posts.id"), index=True)
    follower: Mapped[str] = mapped_column(String(200))


MODELS: tuple[type[Post], type[Inbox]] = (Post, Inbox)


def _session_of(row: object) -> Session:
    session = Session.object_session(row)
    if session is None:  # only if called outside a worker; Stator always attaches one
        raise RuntimeError(f"{row!r} is not in a session")
    return session


# -- the unreliable remote server ----------------------------------------------------------


@dataclass
class FlakyRemote:
    """Stands in for followers' servers: slow, and failing at ``failure_rate``.

    Every random draw comes from one seeded generator, so a run's failures are reproducible
    up to the order in which the worker happens to call it.
    """

    failure_rate: float
    seed: int = 0
    latency: float = 0.08  # mean seconds per call
    calls: int = 0
    failures: int = 0
    throttled: int = 0
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if not 0.0 <= self.failure_rate <= 1.0:
            raise ValueError(f"failure_rate must be between 0 and 1 (got {self.failure_rate})")
        self._rng = random.Random(self.seed)

    async def deliver(self, follower: str) -> None:
        """Pretend to POST to the follower's server; raise the way a real client would."""
        delay, outcome = self._draw()
        await asyncio.sleep(delay)
        if outcome == "fail":
            server = follower.rsplit("@", 1)[-1]
            raise RemoteError(f"{server} answered 503 Service Unavailable")
        if outcome == "throttle":
            raise TryAgainLater(THROTTLE_DELAY)  # not a failure: no backoff, streak starts over

    def _draw(self) -> tuple[float, str]:
        with self._lock:
            self.calls += 1
            delay = self._rng.uniform(0.5, 1.5) * self.latency
            roll = self._rng.random()
            if roll < self.failure_rate * THROTTLE_SHARE:
                self.throttled += 1
                return delay, "throttle"
            if roll < self.failure_rate:
                self.failures += 1
                return delay, "fail"
            return delay, "ok"


_active: FlakyRemote | None = None  # the remote of the demo now running (one at a time)


def _remote() -> FlakyRemote:
    if _active is None:
        raise RuntimeError("no demo is running")
    return _active


@contextlib.contextmanager
def _using(remote: FlakyRemote) -> Iterator[None]:
    """Make ``remote`` the one handlers talk to (graphs are classes, so it cannot be passed
    to them), and make sure a finished demo leaves none behind."""
    global _active
    if _active is not None:
        raise RuntimeError("another demo is already running in this process")
    _active = remote
    try:
        yield
    finally:
        _active = None


# -- running -------------------------------------------------------------------------------


@dataclass
class DemoSummary:
    """How a demo run ended; ``pending`` is only non-zero if it was interrupted."""

    posts: int
    followers: int
    inbox_rows: int
    delivered: int
    undeliverable: int
    pending: int
    posts_done: int
    failed_attempts: int
    throttled: int
    remote_calls: int
    transitions: int
    seconds: float
    interrupted: bool
    counts: dict[str, dict[str, int]]

    @property
    def transitions_per_second(self) -> float:
        return self.transitions / self.seconds if self.seconds > 0 else 0.0


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
        with _using(remote), _failures_quiet():
            run, interrupted = _run_worker(stator, remote, console, posts, followers)
        summary = _summarise(stator, remote, run, posts, followers, interrupted)
    finally:
        stator.dispose()
    console.print(summary_table(summary))
    return summary


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


# -- showing it ----------------------------------------------------------------------------


def _state_counts(conn: Connection) -> dict[str, dict[str, int]]:
    """Rows per state for each demo model, every state of its graph listed in order."""
    counts: dict[str, dict[str, int]] = {}
    for model in MODELS:
        query = select(model.state, func.count()).group_by(model.state)
        found = {state: int(rows) for state, rows in conn.execute(query)}
        counts[model.__name__] = {name: found.get(name, 0) for name in model.state_graph.states}
    return counts


def _read_counts(stator: Stator) -> dict[str, dict[str, int]]:
    with stator.engine.connect() as conn:
        return _state_counts(conn)


def _progress(stator: Stator, remote: FlakyRemote, run: _Run, title: str) -> Group:
    elapsed = (run.ended or time.monotonic()) - run.began
    table = _counts_table(_read_counts(stator))
    line = Text.assemble(
        ("remote: ", "bold"), f"{remote.calls} calls, ",
        (f"{remote.failures} failed", "red"), ", ",
        (f"{remote.throttled} throttled", "yellow"), f"   elapsed {elapsed:.1f}s",
    )
    return Group(Text(f"Stator demo: {title}", style="bold"), table, line)


def _counts_table(counts: dict[str, dict[str, int]]) -> Table:
    table = Table(box=None, pad_edge=False)
    table.add_column("model", style="cyan")
    table.add_column("state")
    table.add_column("rows", justify="right")
    table.add_column("", width=32)
    for model, states in counts.items():
        total = sum(states.values())
        for index, (state, rows) in enumerate(states.items()):
            bar = Bar(size=max(total, 1), begin=0, end=rows, width=30, color=_colour(state))
            table.add_row(model if index == 0 else "", state, str(rows), bar)
    return table


def _colour(state: str) -> str:
    if state in ("done", "delivered"):
        return "green"
    if state == "undeliverable":
        return "red"
    return "yellow"


def _summarise(
    stator: Stator, remote: FlakyRemote, run: _Run, posts: int, followers: int,
    interrupted: bool,
) -> DemoSummary:
    counts = _read_counts(stator)
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


def summary_table(summary: DemoSummary) -> Table:
    """The closing table; public so the CLI can reprint it."""
    title = "Demo interrupted" if summary.interrupted else "Demo finished"
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    for label, value in _summary_rows(summary):
        table.add_row(label, value)
    return table


def _summary_rows(s: DemoSummary) -> Sequence[tuple[str, str]]:
    rows = [
        ("posts fanned out and settled", f"{s.posts_done} / {s.posts}"),
        ("inbox rows", f"{s.inbox_rows} ({s.posts} x {s.followers} expected)"),
        ("delivered", str(s.delivered)),
        (f"undeliverable ({MAX_ATTEMPTS} failed attempts)", str(s.undeliverable)),
    ]
    if s.pending:
        rows.append(("still pending", str(s.pending)))
    rows += [
        ("failed attempts (retried with backoff)", str(s.failed_attempts)),
        ("throttled (TryAgainLater, no penalty)", str(s.throttled)),
        ("calls to the remote", str(s.remote_calls)),
        ("elapsed", f"{s.seconds:.1f}s"),
        ("transitions", f"{s.transitions} ({s.transitions_per_second:.0f}/s)"),
    ]
    return rows
