"""Measure peer job systems on this machine, so Stator's benchmark figures have a yardstick.

For each system and settings variant: make a throwaway store (a PostgreSQL database created
through the maintenance database, or a temporary SQLite file for huey), bulk-enqueue N no-op
jobs, then time ONE worker process from its start until all N jobs are completed. Each run
happens in a child process of its own (measure.py, or graphile_worker.cjs under Node) bounded
by a timeout; its store is removed afterwards whatever happened.

Run with the peers' virtualenv (made by setup.sh), never the stator one:

    bash benchmarks/peers/setup.sh
    benchmarks/peers/.venv/bin/python benchmarks/peers/run.py [--quick] [--systems a,b]

Writes one JSON object per successful run to stdout and appends it to
benchmarks/results/peers.jsonl; a table and any failures go to stderr. Exits 1 if any run
that was asked for failed, timed out or processed fewer than N jobs, so CI notices rot.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE / ".node" / "node_modules"
DEFAULT_OUT = HERE.parent / "results" / "peers.jsonl"
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
FULL_JOBS = 20_000
QUICK_JOBS = 2_000
ALL_SYSTEMS = ("pgqueuer", "procrastinate", "huey", "graphile-worker")

# graphile-worker's own documented performance preset (docs "Performance": concurrency 24,
# pool 25, a 500-job local queue, completion batching with no added delay).
GRAPHILE_BATCHED = {
    "concurrentJobs": 24,
    "maxPoolSize": 25,
    "localQueue": {"size": 500},
    "completeJobBatchDelay": 0,
    "failJobBatchDelay": 0,
}


@dataclass(frozen=True)
class Variant:
    """One way of running one peer: ``settings`` are passed to its worker as they are."""

    system: str
    name: str
    backend: str
    settings: dict[str, Any] = field(default_factory=dict)


# The defaults come first for each system: they are what a user who reads only the
# quick-start gets. The others are the fastest settings the peer's own docs recommend for
# many short jobs. Why each was chosen is written up in README.md.
VARIANTS = (
    Variant("pgqueuer", "default", "postgresql"),  # QueueManager.run batch_size=10
    Variant("pgqueuer", "batch=100", "postgresql", {"batch_size": 100}),
    Variant("procrastinate", "default", "postgresql"),  # concurrency=1
    Variant("procrastinate", "concurrency=10", "postgresql", {"concurrency": 10}),
    Variant("huey", "default", "sqlite"),  # 1 thread worker, WAL, fsync on every commit
    Variant("huey", "fsync=off", "sqlite", {"fsync": False}),
    Variant("graphile-worker", "default", "postgresql"),  # concurrentJobs=1, no batching
    Variant(
        "graphile-worker", "concurrency=24", "postgresql", {"concurrentJobs": 24, "maxPoolSize": 25}
    ),
    Variant("graphile-worker", "batched", "postgresql", GRAPHILE_BATCHED),
)


@dataclass
class Outcome:
    """How one variant's run ended: a result record, or why there is none."""

    variant: Variant
    record: dict[str, Any] | None = None
    problem: str = ""
    counts_as_failure: bool = True


class RunFailed(Exception):
    """A child run did not produce a valid measurement; the message says why."""


# --- stores -----------------------------------------------------------------------------------


def plain_url(url: str) -> str:
    """Drop a SQLAlchemy driver suffix (postgresql+psycopg://), as used by Stator's own settings.

    psycopg, asyncpg and node-postgres all want the plain ``postgresql://`` form.
    """
    parts = urlsplit(url)
    return parts._replace(scheme=parts.scheme.split("+")[0]).geturl()


def database_url(maintenance_url: str, name: str) -> str:
    """The maintenance URL with its database swapped for ``name`` (asyncpg and node want URLs)."""
    return urlsplit(maintenance_url)._replace(path=f"/{name}").geturl()


def server_version(maintenance_url: str) -> str:
    """The PostgreSQL server version, recorded so figures from different servers are told apart."""
    with psycopg.connect(maintenance_url, autocommit=True) as connection:
        row = connection.execute("SHOW server_version").fetchone()
    return f"PostgreSQL {row[0].split()[0]}" if row else "PostgreSQL ?"


@contextmanager
def throwaway_database(maintenance_url: str, slug: str) -> Iterator[str]:
    """Create an empty database for one run and drop it afterwards, even after a failure.

    DROP ... WITH (FORCE) ends any session a killed child left behind, so a timeout cannot
    leave the database (or its connections) around.
    """
    name = f"stator_peers_{slug}_{os.getpid()}"
    ident = sql.Identifier(name)
    with psycopg.connect(maintenance_url, autocommit=True) as connection:
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        connection.execute(sql.SQL("CREATE DATABASE {}").format(ident))
    try:
        yield database_url(maintenance_url, name)
    finally:
        with psycopg.connect(maintenance_url, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))


@contextmanager
def throwaway_sqlite(slug: str) -> Iterator[str]:
    """A path for a fresh SQLite file in a temporary folder removed afterwards (WAL files too)."""
    folder = tempfile.mkdtemp(prefix=f"stator-peers-{slug}-")
    try:
        yield os.path.join(folder, "queue.db")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def store_for(variant: Variant, maintenance_url: str) -> Iterator[str]:
    """The right kind of throwaway store for the variant's backend."""
    slug = re.sub(r"[^a-z0-9]+", "_", f"{variant.system} {variant.name}".lower()).strip("_")
    if variant.backend == "sqlite":
        with throwaway_sqlite(slug) as path:
            yield path
    else:
        with throwaway_database(maintenance_url, slug) as url:
            yield url


# --- child runs -------------------------------------------------------------------------------


def graphile_available() -> str:
    """Why graphile-worker cannot run here, or "" when node and the npm install are present."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not (NODE_MODULES / "graphile-worker" / "package.json").exists():
        return "graphile-worker is not installed (run benchmarks/peers/setup.sh)"
    return ""


def child_command(variant: Variant, target: str, jobs: int) -> list[str]:
    """The command that measures ``variant`` once against ``target``."""
    settings = json.dumps(variant.settings)
    arguments = ["--target", target, "--jobs", str(jobs), "--settings", settings]
    if variant.system == "graphile-worker":
        return ["node", str(HERE / "graphile_worker.cjs"), *arguments]
    return [sys.executable, str(HERE / "measure.py"), variant.system, *arguments]


def child_environment() -> dict[str, str]:
    """The environment for children: node must resolve graphile-worker from .node/."""
    environment = dict(os.environ)
    environment["NODE_PATH"] = str(NODE_MODULES)
    return environment


def run_child(command: list[str], timeout: float) -> dict[str, Any]:
    """Run one measurement process and return its JSON line; kill its whole group on timeout.

    The child gets a session of its own so that killing it also kills anything it started
    (worker threads or processes), and so that a Ctrl-C here reaches only this script, whose
    clean-up then ends the child.
    """
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_environment(),
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as error:
        raise RunFailed(f"TIMED OUT after {timeout:.0f} s, skipped") from error
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    if process.returncode != 0:
        tail = " | ".join(stderr.strip().splitlines()[-5:])
        raise RunFailed(f"FAILED: exited with status {process.returncode}: {tail}")
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RunFailed("FAILED: printed no result")
    return json.loads(lines[-1])


def check_counts(result: dict[str, Any], jobs: int) -> None:
    """Refuse a run that did not execute every job once and leave the queue empty."""
    if result["completed"] != jobs or result["remaining"] != 0:
        raise RunFailed(
            f"FAILED: executed {result['completed']} of {jobs} jobs, "
            f"{result['remaining']} left queued"
        )


def make_record(
    variant: Variant, result: dict[str, Any], jobs: int, env: dict[str, str], load_before: float
) -> dict[str, Any]:
    """The JSON line for one successful run; the first fields are the ones the issue asks for."""
    seconds = float(result["seconds"])
    return {
        "scenario": "peer",
        "system": variant.system,
        "variant": variant.name,
        "backend": variant.backend,
        "version": result["version"],
        "jobs": jobs,
        "seconds": round(seconds, 4),
        "jobs_per_second": round(jobs / seconds, 1),
        "enqueue_seconds": round(float(result["enqueue_seconds"]), 4),
        "workers": 1,
        "settings": variant.settings,
        "runtime": env["node"] if variant.system == "graphile-worker" else env["python"],
        "server": env[variant.backend],
        "cpus": os.cpu_count(),
        "load_before": round(load_before, 2),
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def measure(variant: Variant, args: argparse.Namespace, env: dict[str, str]) -> Outcome:
    """Run one variant in a throwaway store and turn what happened into an Outcome."""
    if variant.system == "graphile-worker" and (missing := graphile_available()):
        return Outcome(variant, problem=f"skipped: {missing}", counts_as_failure=args.explicit)
    # The 1-minute load average before the run: a figure taken while something else (say,
    # stator bench) kept the cores busy can then be recognised and discarded.
    load_before = os.getloadavg()[0]
    try:
        with store_for(variant, args.pg) as target:
            result = run_child(child_command(variant, target, args.jobs), args.timeout)
        check_counts(result, args.jobs)
    except RunFailed as error:
        return Outcome(variant, problem=str(error))
    except (psycopg.Error, OSError, ValueError, KeyError) as error:
        return Outcome(variant, problem=f"FAILED: {type(error).__name__}: {error}")
    return Outcome(variant, record=make_record(variant, result, args.jobs, env, load_before))


# --- reporting --------------------------------------------------------------------------------


def environment_facts(args: argparse.Namespace, variants: list[Variant]) -> dict[str, str]:
    """Versions of the runtimes and servers involved, looked up once per invocation."""
    facts = {
        "python": f"python {platform.python_version()}",
        "sqlite": f"SQLite {sqlite3.sqlite_version}",
        "node": "",
        "postgresql": "",
    }
    if any(v.backend == "postgresql" for v in variants):
        facts["postgresql"] = server_version(args.pg)
    if shutil.which("node"):
        node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False)
        facts["node"] = f"node {node.stdout.strip()}"
    return facts


def emit(record: dict[str, Any], out: Path) -> None:
    """Print one result line to stdout and append it to the results file."""
    line = json.dumps(record)
    print(line, flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def table(outcomes: list[Outcome]) -> str:
    """A plain-text table of all outcomes for people reading stderr."""
    header = f"{'system':<16} {'variant':<15} {'backend':<10} {'version':<9} {'jobs':>7} "
    header += f"{'seconds':>8} {'jobs/s':>9}"
    lines = [header, "-" * len(header)]
    for outcome in outcomes:
        v, r = outcome.variant, outcome.record
        start = f"{v.system:<16} {v.name:<15} {v.backend:<10} "
        if r is None:
            lines.append(start + outcome.problem)
        else:
            lines.append(
                start + f"{r['version']:<9} {r['jobs']:>7} {r['seconds']:>8.2f} "
                f"{r['jobs_per_second']:>9,.0f}"
            )
    return "\n".join(lines)


# --- command line -----------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Read options; --quick is the CI form (2,000 jobs)."""
    parser = argparse.ArgumentParser(
        description="Time peer job systems on N no-op jobs with one worker each."
    )
    parser.add_argument("--jobs", type=int, help=f"jobs per run (default {FULL_JOBS:,})")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_JOBS:,} jobs per run")
    parser.add_argument("--systems", help=f"comma-separated subset of {','.join(ALL_SYSTEMS)}")
    parser.add_argument("--pg", default=DEFAULT_PG, help="PostgreSQL maintenance database URL")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run (default 600)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON-lines file to extend")
    args = parser.parse_args(argv)
    args.jobs = args.jobs or (QUICK_JOBS if args.quick else FULL_JOBS)
    args.pg = plain_url(args.pg)
    args.explicit = args.systems is not None
    args.systems = [s.strip() for s in (args.systems or ",".join(ALL_SYSTEMS)).split(",") if s]
    unknown = sorted(set(args.systems) - set(ALL_SYSTEMS))
    if unknown:
        parser.error(f"unknown system(s) {', '.join(unknown)}; known: {', '.join(ALL_SYSTEMS)}")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    return args


def exit_on_sigterm(signum: int, frame: object) -> NoReturn:
    """Turn SIGTERM into SystemExit so clean-up (kill child, drop database) still runs."""
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    """Measure every chosen variant in turn; return 1 if any that counts did not succeed."""
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    args = parse_args(argv)
    variants = [v for v in VARIANTS if v.system in args.systems]
    try:
        env = environment_facts(args, variants)
    except psycopg.OperationalError as error:
        print(f"peers: cannot reach PostgreSQL at {args.pg}: {error}", file=sys.stderr)
        return 1
    outcomes = []
    for variant in variants:
        print(f"peers: {variant.system} [{variant.name}] {args.jobs:,} jobs ...", file=sys.stderr)
        started = time.perf_counter()
        outcome = measure(variant, args, env)
        elapsed = time.perf_counter() - started
        if outcome.record is not None:
            emit(outcome.record, args.out)
        else:
            print(f"peers: {variant.system} [{variant.name}] {outcome.problem}", file=sys.stderr)
        print(f"peers:   done in {elapsed:.1f} s", file=sys.stderr)
        outcomes.append(outcome)
    print("\n" + table(outcomes), file=sys.stderr)
    failed = [o for o in outcomes if o.record is None and o.counts_as_failure]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
