"""``stator launcher-status``: the state file of a control place, made readable."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from .._clock import Clock, SystemClock
from ..errors import ConfigError
from ._place import Place


class NoLauncherState(ConfigError):
    """No launcher ever wrote its state in this control place."""


def status_report(control: Path, clock: Clock | None = None) -> dict[str, Any]:
    """The last state the launcher wrote, with ``running`` checked against the lock and each
    running scheduler's ``uptime`` (seconds) worked out now."""
    place = Place(control)
    state = place.read_state()
    if state is None:
        raise NoLauncherState(
            f"no launcher state in {control} (is `stator launcher` running from this "
            "directory? otherwise pass its --control PATH)"
        )
    running = place.held_by_someone()
    state["launcher"]["running"] = running
    now = (clock or SystemClock()).now()
    for db in state.get("databases", []):
        started = db.get("started_at")
        if not running:
            db["pid"] = None
        db["uptime"] = (
            round((now - datetime.fromisoformat(started)).total_seconds(), 1)
            if started and db["pid"] else None
        )
    return state


def render(report: dict[str, Any], console: Console) -> None:
    launcher = report["launcher"]
    if launcher["running"]:
        head = (f"launcher pid {launcher['pid']} running since {_short(launcher['started_at'])}"
                f" — {launcher['slots_used']}/{launcher['max_workers']} worker slots used "
                f"(the launcher holds one), {launcher['waiting']} database(s) waiting")
    else:
        head = f"no launcher running (last state written {_short(launcher.get('updated_at'))})"
    table = Table(title=head, title_justify="left")
    for column in ("database", "state", "slot", "pid", "uptime", "starts", "restarts",
                   "last error"):
        table.add_column(column, justify="right" if column in ("pid", "uptime", "starts",
                                                               "restarts") else "left",
                         no_wrap=True)
    for db in report.get("databases", []):
        uptime = db.get("uptime")
        table.add_row(
            db["database"], db["state"], "yes" if db["slot"] else "",
            str(db["pid"] or ""), "" if uptime is None else f"{uptime:.0f}s",
            str(db["starts"]), str(db["restarts"]), db.get("last_error") or "",
        )
    _print_whole(table, console)


def _print_whole(table: Table, console: Console) -> None:
    """Print the table as wide as it needs, so no URL or error is folded mid-word (and can
    still be copied), with no padding after the last character of a line."""
    unbounded = console.options.update_width(100_000)
    width = max(console.width, Measurement.get(console, unbounded, table).maximum)
    plain = Console(file=io.StringIO(), width=width, markup=False, color_system=None,
                    highlight=False)
    plain.print(table)
    for line in plain.file.getvalue().splitlines():  # type: ignore[attr-defined]
        console.out(line.rstrip(), highlight=False)


def _short(when: str | None) -> str:
    if not when:
        return "?"
    return datetime.fromisoformat(when).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
