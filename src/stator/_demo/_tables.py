"""What the demo shows: rows per state as bars while it runs, and the closing summary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.bar import Bar
from rich.table import Table
from sqlalchemy import Connection, func, select

from .._stator import Stator
from ._models import MAX_ATTEMPTS, MODELS


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


def _state_counts(conn: Connection) -> dict[str, dict[str, int]]:
    """Rows per state for each demo model, every state of its graph listed in order."""
    counts: dict[str, dict[str, int]] = {}
    for model in MODELS:
        query = select(model.state, func.count()).group_by(model.state)
        found = {state: int(rows) for state, rows in conn.execute(query)}
        counts[model.__name__] = {name: found.get(name, 0) for name in model.state_graph.states}
    return counts


def read_counts(stator: Stator) -> dict[str, dict[str, int]]:
    with stator.engine.connect() as conn:
        return _state_counts(conn)


def counts_table(counts: dict[str, dict[str, int]]) -> Table:
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
