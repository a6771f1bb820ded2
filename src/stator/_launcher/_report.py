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


class LauncherStateUnreadable(ConfigError):
    """The control place's state file is not what a launcher writes (hand-edited, cut
    short, another program's): said in one line, never a traceback."""


def status_report(control: Path, clock: Clock | None = None) -> dict[str, Any]:
    """The last state the launcher wrote, with ``running`` checked against the lock and each
    running scheduler's ``uptime`` (seconds) worked out now."""
    place = Place(control)
    try:
        state = place.read_state()
    except ConfigError as exc:
        raise LauncherStateUnreadable(f"launcher state unreadable: {exc}") from None
    if state is None:
        raise NoLauncherState(
            f"no launcher state in {control} (is `stator launcher` running from this "
            "directory? otherwise pass its --control PATH)"
        )
    problem = _problem(state)
    if problem is not None:
        raise LauncherStateUnreadable(
            f"launcher state unreadable: {place.state_path}: {problem}")
    running = place.held_by_someone()
    state["launcher"]["running"] = running
    now = (clock or SystemClock()).now()
    for db in state.get("databases", []):
        started = db.get("started_at")
        if not running:
            db["pid"] = None
        db["uptime"] = (
            round((now - datetime.fromisoformat(started)).total_seconds(), 1)
            if started and db.get("pid") else None
        )
    return state


# What ``render`` and the dashboard read, by type; each may be missing or null.
_LAUNCHER_FIELDS = {"pid": int, "slots_used": int, "max_workers": int, "waiting": int,
                    "started_at": datetime, "updated_at": datetime}
_DATABASE_FIELDS = {"database": str, "state": str, "slot": bool, "pid": int, "starts": int,
                    "restarts": int, "last_error": str, "started_at": datetime}


def _problem(state: dict[str, Any]) -> str | None:
    """The first value a report could not show, if any."""
    launcher = state.get("launcher")
    if not isinstance(launcher, dict):
        return '"launcher" is not an object'
    databases = state.get("databases", [])
    if not isinstance(databases, list):
        return '"databases" is not a list'
    if not all(isinstance(db, dict) for db in databases):
        return '"databases" holds something other than objects'
    return next((p for p in [_field_problem("launcher", launcher, _LAUNCHER_FIELDS)] + [
        _field_problem(f"databases[{i}]", db, _DATABASE_FIELDS)
        for i, db in enumerate(databases)] if p is not None), None)


def _field_problem(where: str, found: dict[str, Any], fields: dict[str, type]) -> str | None:
    for name, kind in fields.items():
        value = found.get(name)
        if value is None:
            continue
        if kind is datetime:
            try:
                aware = datetime.fromisoformat(value).tzinfo is not None
            except (TypeError, ValueError):
                aware = False
            if not aware:
                return f"{where}.{name} is not a time with a time zone: {value!r}"[:200]
        elif not isinstance(value, kind):
            return f"{where}.{name} is not {kind.__name__}: {value!r}"[:200]
    return None


def render(report: dict[str, Any], console: Console) -> None:
    launcher = report["launcher"]
    if launcher["running"]:
        head = (f"launcher pid {launcher.get('pid')} running since "
                f"{_short(launcher.get('started_at'))} — {launcher.get('slots_used')}/"
                f"{launcher.get('max_workers')} worker slots used (the launcher holds one), "
                f"{launcher.get('waiting')} database(s) waiting")
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
            db.get("database") or "?", db.get("state") or "?", "yes" if db.get("slot") else "",
            str(db.get("pid") or ""), "" if uptime is None else f"{uptime:.0f}s",
            str(db.get("starts", "")), str(db.get("restarts", "")), db.get("last_error") or "",
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
