"""``stator status``: rows per model and state, recent throughput and errors, live workers."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from .._console import out, user_errors
from ._app import app_command, load_app


@click.command()
@app_command
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(app: str, db: str | None, as_json: bool) -> None:
    """Rows per model and state, what is due, recent throughput and errors, live workers."""
    with user_errors():
        report = load_app(app, db).status()
    print_status(report, as_json)


def print_status(report: dict[str, Any], as_json: bool) -> None:
    """The report as JSON or as tables (``stator status``, ``manage.py stator status``)."""
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
        for s in model["states"]:  # every state of the graph, the empty ones at zero
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
    for model in report["models"]:
        for limit in model.get("limits", []):
            out.print(f"{model['model']}.{limit['state']}: {_limit_text(limit)}",
                      highlight=False)
    _print_schedules(report.get("schedules", []))
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



def _print_schedules(schedules: list[dict[str, Any]]) -> None:
    if not schedules:
        return
    table = Table(title="schedules", title_justify="left")
    for column in ("schedule", "when", "state", "last tick", "next tick", "last result",
                   "fired", "missed", "lag"):
        table.add_column(column, justify="right" if column in ("fired", "missed", "lag")
                         else "left")
    for s in schedules:
        result = s["last_outcome"] or ""
        if s["last_result"]:
            result += f" ({s['last_result']})"
        table.add_row(s["name"], s["when"], s["state"], s["last_tick"] or "",
                      s["next_tick"] or "", result, str(s["fired"]), str(s["missed"]),
                      f"{s['lag_seconds']:.1f}s")
    out.print(table)


def _limit_text(limit: dict[str, Any]) -> str:
    """``3/4 running`` for a limit on a state; per key, the busiest keys' ``key 2/2``."""
    def of(k: dict[str, Any]) -> str:
        return f"{k['running']}/{k['limit'] if k['limit'] is not None else '∞'}"

    if limit["key_column"] is None:
        return f"{of(limit['keys'][0])} running"
    busiest = ", ".join(f"{k['key']} {of(k)}" for k in limit["keys"]) or "none"
    return (f"{limit['running']} running, limit per {limit['key_column']}; "
            f"busiest: {busiest}")
