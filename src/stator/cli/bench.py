"""``stator bench``: Stator measured on a real database, one table per scenario."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from .._console import err, out, user_errors
from ..errors import ConfigError
from ._app import split_names


@click.command()
@click.option("--db", metavar="URL", help="PostgreSQL server to measure (a throwaway database "
              "per scenario, dropped afterwards); default: throwaway SQLite files.")
@click.option("--scenario", "scenarios", multiple=True, metavar="NAME",
              help="Run only this scenario (repeat or comma-separate; default: all of "
              "throughput, limit, latency, scale, idle, memory, fanout, limits, django).")
@click.option("--quick", is_flag=True, help="Small sizes (a few minutes): for CI and a first look.")
@click.option("--rows", type=click.IntRange(min=1), default=None,
              help="Rows through the graph in throughput and limit [default: 20000; quick: 2000].")
@click.option("--processes", metavar="N,N,…",
              help="Worker process counts for throughput [default: 1,2,4; quick: 1,2].")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--plain-rows", is_flag=True, help="Throughput and django: measure handlers "
              "given plain rows (StateGraph.plain_rows) too, each run in turn with the ORM "
              "rows' one.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per result line.")
def bench(
    db: str | None, scenarios: tuple[str, ...], quick: bool, rows: int | None,
    processes: str | None, concurrency: int, batch_size: int, plain_rows: bool,
    as_json: bool,
) -> None:
    """Measure Stator on a real database: throughput, the database's own limit, latency,
    scale, idle cost, memory and fan-out."""
    from .._bench import Sizes, run_bench

    with user_errors():
        sizes = (Sizes.quick() if quick else Sizes()).with_rows(rows)
        sizes = sizes.with_processes(_process_counts(processes))
        results = run_bench(
            db, split_names(scenarios), sizes, concurrency=concurrency, batch_size=batch_size,
            progress=lambda message: err.print(Text(message, style="dim"), highlight=False),
            plain_rows=plain_rows,
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
                "scale": "table_rows", "limits": "graph"}


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
        if "measure" in line:  # limits: throughput, or one claim's cost
            heading = f"{line['measure']}, {heading}"
        if "objects" in line:  # throughput: what the handlers got, ORM or plain rows
            heading = f"{line['objects']} rows, {heading}"
        table.add_column(heading, justify="right")
    skip = {"scenario", "backend", "loop", "measure", "objects", label}
    keys = [k for k in dict.fromkeys(k for line in lines for k in line)  # every line's figures
            if k not in skip and not any(isinstance(line.get(k), list) for line in lines)]
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
