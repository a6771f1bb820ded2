"""Regenerate benchmarks/RESULTS.md and benchmarks/throughput.png from one full benchmark run.

    python benchmarks/report.py [--db URL] [--quick] [--no-run] [--skip-postgresql]
    python benchmarks/report.py --django 3 [--db URL]

Runs ``stator bench --json`` on SQLite and on PostgreSQL (``--db``: a server URL; the bench
makes and drops its own databases there), saves the JSON lines under ``benchmarks/results/``,
reads the peers' figures from ``benchmarks/results/peers.jsonl`` if that file exists
(written by ``benchmarks/peers/run.py``), and writes the report: the machine, the main table,
the issue's targets marked met or not, every scenario's figures, and a plot.  ``--no-run``
rebuilds the report from the saved results without measuring again.  ``--django N`` measures
only the Django store against the SQLAlchemy store (``stator bench --scenario django``), N
times on each database, the databases alternated, into ``benchmarks/results/django_store.jsonl``
(each line dated), and rebuilds the report: those runs then stand in for the full run's own
``django`` lines.

Needs the ``bench`` extra (matplotlib): ``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
REPORT = HERE / "RESULTS.md"
KEPT = "<!-- kept: sections below are written by hand from other scripts; report.py keeps them -->"
PLOT = HERE / "throughput.png"
PEERS = RESULTS / "peers.jsonl"
DJANGO_RUNS = RESULTS / "django_store.jsonl"
DEFAULT_PG = os.environ.get("STATOR_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
STATOR = [sys.executable, "-c", "from stator.cli import main; main(prog_name='stator')"]
BACKENDS = ("sqlite", "postgresql")
NAMES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}

# The issue's reference figures, used when the peers were not measured on this machine.
ISSUE_FIGURES = {
    ("pgqueuer", "default"): 4_000.0,
    ("huey", "default"): 2_800.0,
    ("graphile-worker", "batched"): 21_600.0,
}

Line = dict[str, Any]


# -- running ---------------------------------------------------------------------------------


def run_bench(backend: str, db: str, quick: bool, *extra: str) -> list[Line]:
    """One ``stator bench --json`` run; its progress goes to this terminal."""
    command = [*STATOR, "bench", "--json", *extra]
    if quick:
        command.append("--quick")
    if backend == "postgresql":
        command += ["--db", db]
    print(f"== stator bench on {NAMES[backend]}: {' '.join(command[3:])}", file=sys.stderr)
    began = time.monotonic()
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"stator bench on {backend} failed (exit code {done.returncode})")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    print(f"== {NAMES[backend]}: {time.monotonic() - began:.0f}s", file=sys.stderr)
    return lines


def save(path: Path, lines: Iterable[Line]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def load(path: Path) -> list[Line]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def measure_django(db: str, runs: int, backends: list[str]) -> list[Line]:
    """``runs`` Django-store runs per database, alternated so that a change in the machine's
    speed during the measurement falls on both databases alike."""
    measured: list[Line] = []
    commit = _git_commit()
    for _ in range(runs):
        for backend in backends:
            when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
            for line in run_bench(backend, db, False, "--scenario", "django"):
                measured.append({**line, "measured": when, "git_commit": commit})
    return measured


def django_lines(lines: list[Line], runs: list[Line]) -> list[Line]:
    """The full run's lines, with the separate Django-store runs (if any) in place of its own."""
    if not runs:
        return lines
    return [ln for ln in lines if ln.get("scenario") != "django"] + runs


# -- the machine -----------------------------------------------------------------------------


def machine(db: str | None) -> dict[str, str]:
    """What the figures were measured on."""
    info = {
        "CPU": _cpu_model(),
        "cores": str(os.cpu_count()),
        "RAM": f"{_mem_total_gib():.1f} GiB",
        "OS": f"{_os_name()} (Linux {platform.release()})",
        "Python": platform.python_version(),
        "SQLite": sqlite3.sqlite_version,
        "stator": _version("stator-engine"),
        "SQLAlchemy": _version("sqlalchemy"),
        "psycopg": _version("psycopg"),
        "git commit": _git_commit(),
        "measured": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    if db is not None:
        info.update(_postgres(db))
    return info


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _mem_total_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def _os_name() -> str:
    path = Path("/etc/os-release")
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    return platform.system()


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def _git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "../src"], cwd=HERE,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}{' + uncommitted changes in src/' if dirty else ''}"


def _postgres(db: str) -> dict[str, str]:
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(db)
    try:
        with psycopg.connect(host=url.host, port=url.port or 5432, user=url.username,
                             password=url.password, dbname=url.database or "postgres",
                             connect_timeout=5) as conn:
            settings = {
                name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
                for name in ("server_version", "synchronous_commit", "fsync",
                             "shared_buffers")
            }
    except psycopg.Error as exc:
        return {"PostgreSQL": f"unreachable ({exc})"}
    return {
        "PostgreSQL": f"{settings['server_version']} (same machine; shared_buffers "
        f"{settings['shared_buffers']}, fsync {settings['fsync']}, synchronous_commit "
        f"{settings['synchronous_commit']})"
    }


# -- looking results up ----------------------------------------------------------------------


def pick(lines: list[Line], scenario: str, backend: str, **match: Any) -> Line | None:
    for line in lines:
        if (line.get("scenario") == scenario and line.get("backend") == backend
                and all(line.get(k) == v for k, v in match.items())):
            return line
    return None


def value(lines: list[Line], scenario: str, backend: str, key: str, **match: Any) -> Any:
    line = pick(lines, scenario, backend, **match)
    return None if line is None else line.get(key)


def latest_peers(peers: list[Line]) -> list[Line]:
    """The last run of each (system, variant, backend): peers.jsonl is appended to."""
    latest: dict[tuple[str, str, str], Line] = {}
    for line in peers:
        latest[(line["system"], str(line.get("variant", "")), line["backend"])] = line
    return sorted(latest.values(), key=lambda p: (p["backend"], p["system"], str(p.get("variant"))))


def peer_figure(peers: list[Line], system: str, variant: str) -> tuple[float, str]:
    """A peer's jobs/s measured here, else the issue's figure; and where it came from."""
    for line in peers:
        if line["system"] == system and str(line.get("variant", "default")) == variant:
            return float(line["jobs_per_second"]), "measured here"
    return ISSUE_FIGURES[(system, variant)], "the issue's figure (peers not measured here)"


# -- formatting ------------------------------------------------------------------------------


def fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}{unit}"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:,.0f}{unit}"
        if abs(v) >= 10:
            return f"{v:.1f}{unit}"
        return f"{v:.2f}{unit}" if abs(v) >= 0.1 else f"{v:.3f}{unit}"
    return f"{v}{unit}"


def table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out)


def per_backend(label: str, get: Callable[[str], Any], unit: str = "") -> list[str]:
    return [label, *(fmt(get(b), unit) for b in BACKENDS)]


# -- the main table and the targets ----------------------------------------------------------


def main_table(lines: list[Line]) -> str:
    def v(scenario: str, key: str, **match: Any) -> Callable[[str], Any]:
        return lambda backend: value(lines, scenario, backend, key, **match)

    def latency(mode: str) -> Callable[[str], str | None]:
        def get(backend: str) -> str | None:
            line = pick(lines, "latency", backend, mode=mode)
            if line is None:
                return None
            return f"{line['p50_ms']:.1f} / {line['p95_ms']:.1f} / {line['p99_ms']:.1f}"
        return get

    def scale(key: str, form: str) -> Callable[[str], str | None]:
        def get(backend: str) -> str | None:
            found = [ln for ln in lines if ln["scenario"] == "scale" and ln["backend"] == backend]
            return " / ".join(format(ln[key], form) for ln in found) if found else None
        return get

    def scale_sizes() -> str:
        sizes = sorted({ln["table_rows"] for ln in lines if ln["scenario"] == "scale"})
        return " / ".join(_short(s) for s in sizes) or "n/a"

    rows = [
        per_backend("engine, 1 worker process (transitions/s)",
                    v("throughput", "transitions_per_second", processes=1)),
        per_backend("engine, 2 worker processes (transitions/s)",
                    v("throughput", "transitions_per_second", processes=2)),
        per_backend("engine, 4 worker processes (transitions/s)",
                    v("throughput", "transitions_per_second", processes=4)),
        per_backend("minimal claim + fenced write-back loop, batch 100 (transitions/s)",
                    v("limit", "transitions_per_second", batch_size=100, loop="minimal")),
        per_backend("minimal loop, batch 500 (transitions/s)",
                    v("limit", "transitions_per_second", batch_size=500, loop="minimal")),
        per_backend("Stator's own SQL in the same loop, batch 100 (transitions/s)",
                    v("limit", "transitions_per_second", batch_size=100, loop="stator-sql")),
        per_backend("**engine / minimal loop** (1 process, batch 100)",
                    v("limit", "engine_vs_limit", batch_size=100, loop="minimal")),
        per_backend("engine / Stator's own SQL (1 process, batch 100)",
                    v("limit", "engine_vs_limit", batch_size=100, loop="stator-sql")),
        per_backend("minimal loop: database CPU s per 1,000 transitions",
                    v("limit", "db_cpu_s_per_1000", batch_size=100, loop="minimal")),
        per_backend("worker CPU s per 1,000 transitions (1 process)",
                    v("throughput", "worker_cpu_s_per_1000", processes=1)),
        per_backend("database CPU s per 1,000 transitions (1 process; backends)",
                    v("throughput", "db_cpu_s_per_1000", processes=1)),
        per_backend("Django store / SQLAlchemy store, same database (1 process; "
                    "median of the runs below)", _django_ratio(lines)),
        per_backend("peak RSS of a worker (MB)", v("throughput", "peak_rss_mb", processes=1)),
        per_backend("commit → handler start, same process, p50/p95/p99 (ms)",
                    latency("same-process")),
        per_backend("commit → handler start, other process, p50/p95/p99 (ms)",
                    latency("cross-process")),
        per_backend(f"raw loop at {scale_sizes()} rows, {_scale_due(lines)} due "
                    "(transitions/s)",
                    scale("transitions_per_second", ",.0f")),
        per_backend(f"of which one claim of 100 at {scale_sizes()} rows (ms)",
                    scale("claim_ms", ".2f")),
        per_backend("idle worker CPU (%)", v("idle", "worker_cpu_percent")),
        per_backend("idle worker queries/s", v("idle", "queries_per_second")),
        per_backend("RSS over the memory run: settled → last (MB)",
                    lambda b: _rss(pick(lines, "memory", b))),
        per_backend("fan-out: child rows created/s",
                    v("fanout", "rows_created_per_second")),
        per_backend("fan-out: rows processed/s (parents + children)",
                    v("fanout", "rows_processed_per_second")),
    ]
    return table(["", "SQLite", "PostgreSQL"], rows)


def _django_ratio(lines: list[Line]) -> Callable[[str], str | None]:
    def get(backend: str) -> str | None:
        ratios = sorted(ln["django_to_sqlalchemy"] for ln in lines
                        if ln["scenario"] == "django" and ln["backend"] == backend
                        and "django_to_sqlalchemy" in ln)
        if not ratios:
            return None
        low, high = ratios[0], ratios[-1]
        spread = f" ({low:.2f}-{high:.2f}, {len(ratios)} runs)" if len(ratios) > 1 else ""
        return f"{ratios[len(ratios) // 2]:.2f}x{spread}"
    return get


def _scale_due(lines: list[Line]) -> str:
    due = next((ln["due_rows"] for ln in lines if ln["scenario"] == "scale"), None)
    return "n/a" if due is None else _short(due)


def _rss(line: Line | None) -> str | None:
    if line is None:
        return None
    return f"{line['rss_settled_mb']:.1f} → {line['rss_last_mb']:.1f}"


def _short(n: int) -> str:
    for size, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n >= size and n % size == 0:
            return f"{n // size}{suffix}"
    return f"{n:,}"


@dataclass
class Target:
    name: str
    required: str
    measured: str
    met: bool | None  # None: not measured in this run


def targets(lines: list[Line], peers: list[Line]) -> list[Target]:
    found: list[Target] = []
    engine = {b: value(lines, "throughput", b, "transitions_per_second", processes=1)
              for b in BACKENDS}
    limit = {b: value(lines, "limit", b, "transitions_per_second", batch_size=100,
                      loop="minimal") for b in BACKENDS}
    pgq, pgq_src = peer_figure(peers, "pgqueuer", "default")
    graphile, graphile_src = peer_figure(peers, "graphile-worker", "batched")
    huey, huey_src = peer_figure(peers, "huey", "default")
    found.append(_at_least("PostgreSQL: at least twice pgqueuer", engine["postgresql"],
                           2 * pgq, f"2 x {pgq:,.0f} ({pgq_src})"))
    found.append(_at_least("PostgreSQL: at least half the raw limit", engine["postgresql"],
                           None if limit["postgresql"] is None else limit["postgresql"] / 2,
                           "½ x raw loop, batch 100"))
    found.append(_at_least("PostgreSQL (goal beyond): pass graphile-worker batched",
                           engine["postgresql"], graphile, f"{graphile:,.0f} ({graphile_src})"))
    found.append(_at_least("SQLite: at least ten times huey", engine["sqlite"], 10 * huey,
                           f"10 x {huey:,.0f} ({huey_src})"))
    found.append(_at_least("SQLite: at least a quarter of the raw limit", engine["sqlite"],
                           None if limit["sqlite"] is None else limit["sqlite"] / 4,
                           "¼ x raw loop, batch 100"))
    p50 = value(lines, "latency", "postgresql", "p50_ms", mode="cross-process")
    found.append(Target("PostgreSQL: commit → handler start p50 under 5 ms", "< 5 ms",
                        fmt(p50, " ms"), None if p50 is None else p50 < 5))
    for backend in BACKENDS:
        found.append(_flat_claims(lines, backend))
    for backend in BACKENDS:
        cpu = value(lines, "idle", backend, "worker_cpu_percent")
        found.append(Target(f"{NAMES[backend]}: idle CPU under 0.5%", "< 0.5%",
                            fmt(cpu, "%"), None if cpu is None else cpu < 0.5))
    for backend in BACKENDS:
        memory = pick(lines, "memory", backend)
        found.append(Target(
            f"{NAMES[backend]}: flat RSS", "growth < 2 MB after warm-up",
            "n/a" if memory is None else
            f"{memory['growth_mb']:+.1f} MB over {memory['transitions']:,} transitions",
            None if memory is None else bool(memory["flat"]),
        ))
    return found


def _at_least(name: str, measured: float | None, required: float | None, how: str) -> Target:
    met = None if measured is None or required is None else measured >= required
    need = "n/a" if required is None else f"≥ {required:,.0f}/s: {how}"
    return Target(name, need, fmt(measured, "/s"), met)


def _flat_claims(lines: list[Line], backend: str) -> Target:
    """Scenario 5 measures claim throughput (claims of 100 + their write-back): flat means
    every table size gets at least 90% of the smallest table's."""
    found = [ln for ln in lines if ln["scenario"] == "scale" and ln["backend"] == backend]
    name = f"{NAMES[backend]}: flat claim throughput, 10k to 10M rows (within 10%)"
    required = "every size ≥ 0.90 x the smallest table's"
    if len(found) < 2:
        return Target(name, required, "n/a", None)
    base = found[0]["transitions_per_second"]
    worst = min(ln["transitions_per_second"] / base for ln in found)
    measured = ", ".join(
        f"{_short(ln['table_rows'])}: {ln['transitions_per_second']:,.0f}/s" for ln in found
    )
    return Target(name, required, f"{measured} (worst x{worst:.2f})", worst >= 0.90)


def targets_table(found: list[Target]) -> str:
    marks = {True: "**met**", False: "**not met**", None: "not measured"}
    return table(["target", "required", "measured", ""],
                 [[t.name, t.required, t.measured, marks[t.met]] for t in found])


# -- the detail tables -----------------------------------------------------------------------

DETAIL_LABEL = {"throughput": "processes", "limit": "batch_size", "latency": "mode",
                "scale": "table_rows"}


def detail(lines: list[Line], scenario: str) -> str:
    """Every figure of one scenario: a row per result."""
    found = [ln for ln in lines if ln["scenario"] == scenario]
    if not found:
        return "_not run_"
    keys: list[str] = []
    for line in found:
        keys += [k for k in line if k not in keys and k != "scenario"
                 and not isinstance(line[k], list)]
    header = [k.replace("_", " ") for k in keys]
    return table(header, [[fmt(line.get(k)) for k in keys] for line in found])


def peers_table(peers: list[Line]) -> str:
    if not peers:
        return ("_Not measured on this machine: `benchmarks/results/peers.jsonl` is missing "
                "(see `benchmarks/peers/`). The targets use the issue's figures._")
    rows = [[p["system"], str(p.get("variant", "")), NAMES.get(p["backend"], p["backend"]),
             str(p.get("version", "")), fmt(p["jobs"]), fmt(p["seconds"]),
             fmt(p["jobs_per_second"]), fmt(p.get("load_before"))] for p in peers]
    return table(["system", "variant", "backend", "version", "jobs", "seconds", "jobs/s",
                  "load before"], rows)


# -- the plot --------------------------------------------------------------------------------


def plot(lines: list[Line], path: Path) -> None:
    """Throughput against worker processes, and claim throughput against table size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = {"sqlite": "tab:blue", "postgresql": "tab:orange"}
    for backend in BACKENDS:
        runs = sorted((ln for ln in lines if ln["scenario"] == "throughput"
                       and ln["backend"] == backend), key=lambda ln: ln["processes"])
        if runs:
            left.plot([r["processes"] for r in runs], [r["transitions_per_second"] for r in runs],
                      "o-", color=colours[backend], label=f"{NAMES[backend]}: engine")
        raw = value(lines, "limit", backend, "transitions_per_second", batch_size=100,
                    loop="minimal")
        if raw:
            left.axhline(raw, linestyle="--", color=colours[backend], alpha=0.6,
                         label=f"{NAMES[backend]}: raw loop, batch 100")
        sizes = [ln for ln in lines if ln["scenario"] == "scale" and ln["backend"] == backend]
        if sizes:
            right.plot([s["table_rows"] for s in sizes],
                       [s["transitions_per_second"] for s in sizes], "o-",
                       color=colours[backend], label=f"{NAMES[backend]}")
    left.set(title="Throughput against worker processes", xlabel="worker processes",
             ylabel="transitions / s")
    left.set_ylim(bottom=0)
    left.legend(fontsize=8)
    due = next((ln["due_rows"] for ln in lines if ln["scenario"] == "scale"), 0)
    right.set(title=f"Raw claim + write-back against table size\n({due:,} rows due, the rest "
              "finished)", xlabel="rows in the table", ylabel="transitions / s", xscale="log")
    right.set_ylim(bottom=0)
    right.legend(fontsize=8)
    for axis in (left, right):
        axis.grid(alpha=0.3)
    left.xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- the report ------------------------------------------------------------------------------


def render(lines: list[Line], peers: list[Line], meta: dict[str, Any]) -> str:
    about = meta["machine"]
    parts = [
        "# Stator benchmark results",
        "",
        "Generated by `python benchmarks/report.py` (do not edit by hand): one run of "
        "`stator bench --json` on SQLite and on PostgreSQL"
        f"{' (quick sizes)' if meta.get('quick') else ''}, plus the peers' figures from "
        "`benchmarks/results/peers.jsonl` when present. Raw results: `benchmarks/results/`.",
        "",
        "## Machine",
        "",
        table(["", ""], [[k, v] for k, v in about.items()]),
        "",
        f"Load average (1, 5, 15 min) before / after the run: {meta.get('load_before', 'n/a')} / "
        f"{meta.get('load_after', 'n/a')}; run time {meta.get('seconds', 'n/a')} s "
        f"({meta.get('timings', '')}).",
        "",
        *_busy_note(lines),
        "## Main table",
        "",
        f"One worker process unless stated; concurrency 4, batch 100; {_rows(lines)} rows "
        "through a three-step graph of no-op handlers (three transitions each). Throughput "
        "and the raw loop: the best of two runs.",
        "",
        main_table(lines),
        "",
        "## Targets (issue #3)",
        "",
        targets_table(targets(lines, latest_peers(peers))),
        "",
        "## Peers (same machine, same PostgreSQL server)",
        "",
        peers_table(latest_peers(peers)),
        "",
        "![throughput against worker processes and table size](throughput.png)",
        "",
    ]
    for scenario, title, note in SECTIONS:
        parts += [f"## {title}", "", note, "", detail(lines, scenario), ""]
    return "\n".join(parts)


def _rows(lines: list[Line]) -> str:
    found = [ln["rows"] for ln in lines if ln["scenario"] == "throughput"]
    return f"{found[0]:,}" if found else "n/a"


def _busy_note(lines: list[Line]) -> list[str]:
    """A warning when other work shared the machine: every figure is then a lower bound."""
    loads = [ln["load_1m"] for ln in lines if isinstance(ln.get("load_1m"), (int, float))]
    cores = os.cpu_count() or 1
    if not loads or max(loads) <= cores / 2:
        return []
    return [
        f"**Note:** other processes shared this {cores}-core machine during the run (1-minute "
        f"load average up to {max(loads):.1f} when results were recorded; see the `load 1m` "
        "column below). Throughput figures are lower bounds.",
        "",
    ]


SECTIONS = [
    ("throughput", "Throughput",
     "Best of two runs per worker count. Real worker processes (`stator._bench._child`, the "
     "same `Worker` as `stator run --until-idle`), started together; time from the start "
     "signal to the last one's end. CPU per 1,000 transitions: the workers' own; on "
     "PostgreSQL also the server backends serving them (`db cpu`) and the WAL writer, "
     "checkpointer and background writer (`db shared cpu`, shared with anything else on the "
     "server), read from `/proc`. On SQLite the database runs inside the worker, so its CPU "
     "is in the worker's."),
    ("limit", "The database's own limit",
     "Best of two runs. Stator's own claim and fenced write-back statements "
     "(`TrackedModel.sql`), driven by a loop with no engine, ORM, handler or thread: one "
     "connection, claim a batch (one transaction), write it back (a second), repeat until "
     "nothing is due."),
    ("latency", "Latency: commit → handler start",
     "Light load: one application transition (`transition_perform` + commit) every 20-50 ms; "
     "latency is the handler's first instruction minus the moment `commit()` returned."),
    ("scale", "Scale: claim throughput against table size",
     "The raw loop (batch 100) over 10,000 due rows (the newest) in tables whose other rows "
     "are finished (terminal, `state_next` NULL); best of three passes per size. On "
     "PostgreSQL autovacuum is off for the table and a VACUUM runs before each pass, so "
     "every size starts clean (autovacuum would otherwise churn through the small table "
     "during the passes and never touch the big ones). `fill seconds`: time to grow the "
     "table to that size (INSERT ... SELECT, statistics refreshed)."),
    ("idle", "Idle cost",
     "One worker process, nothing due. Queries/s: statements sent through SQLAlchemy, "
     "counted in the worker; on PostgreSQL also the database's own transaction counter. On "
     "SQLite the worker also checks `PRAGMA data_version` on its own connection ten times a "
     "second to notice other processes' commits (not SQLAlchemy statements)."),
    ("django", "Django store against the SQLAlchemy store",
     "The same three-step graph of no-op handlers, 20,000 rows, drained by one worker process "
     "through the Django store (`manage.py runstator`'s worker over Django's connections; "
     "best of two runs) and through the SQLAlchemy store (the throughput scenario's one-process "
     "run), on the same database. Issue #9 asks for the Django store within 0.8x. When "
     "`benchmarks/results/django_store.jsonl` exists (`python benchmarks/report.py --django "
     "3`), its runs, alternated between the databases and dated, stand in for the full run's."),
    ("memory", "Memory",
     "RSS of one worker process sampled while it drains the graph; growth = median of the "
     "last quarter of the samples - median of the second quarter."),
    ("fanout", "Fan-out",
     "Each parent's handler adds K child rows in its own session (committed with the "
     "parent's transition); the children are Stator rows with a no-op step."),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default=DEFAULT_PG, help="PostgreSQL server URL")
    parser.add_argument("--quick", action="store_true", help="stator bench --quick")
    parser.add_argument("--no-run", action="store_true",
                        help="rebuild the report from benchmarks/results/ only")
    parser.add_argument("--skip-postgresql", action="store_true")
    parser.add_argument("--django", type=int, metavar="N", default=0,
                        help="measure only the Django store, N runs per database")
    args = parser.parse_args()
    backends = ["sqlite"] if args.skip_postgresql else list(BACKENDS)
    meta_path = RESULTS / "meta.json"
    if args.django:
        save(DJANGO_RUNS, measure_django(args.db, args.django, backends))
    elif not args.no_run:
        meta: dict[str, Any] = {"quick": args.quick, "load_before": _load()}
        began, timings = time.monotonic(), []
        for backend in backends:
            started = time.monotonic()
            save(RESULTS / f"{backend}.jsonl", run_bench(backend, args.db, args.quick))
            timings.append(f"{NAMES[backend]} {time.monotonic() - started:.0f} s")
        meta.update(load_after=_load(), seconds=round(time.monotonic() - began),
                    timings=", ".join(timings),
                    machine=machine(None if args.skip_postgresql else args.db))
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"machine": machine(None)}
    lines = [line for b in BACKENDS for line in load(RESULTS / f"{b}.jsonl")]
    lines = django_lines(lines, load(DJANGO_RUNS))
    REPORT.write_text(render(lines, load(PEERS), meta) + kept_sections())
    plot(lines, PLOT)
    print(f"wrote {REPORT.relative_to(HERE.parent)} and {PLOT.relative_to(HERE.parent)}",
          file=sys.stderr)


def kept_sections() -> str:
    """The sections other scripts measured (benchmarks/hosts.py, torture.py), kept as written:
    everything from the KEPT marker to the end of the current report."""
    text = REPORT.read_text() if REPORT.exists() else ""
    at = text.find(KEPT)
    return "" if at < 0 else "\n" + text[at:]


def _load() -> str:
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


if __name__ == "__main__":
    main()
