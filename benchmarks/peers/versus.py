"""Stator against graphile-worker (batched), in the same run, taking turns.

Issue 23 asks for Stator's PostgreSQL throughput to be ahead of graphile-worker's documented
performance preset, measured in the same run on the same machine.  One round is: graphile-worker
[batched] draining N no-op jobs with one worker process (run.py's measurement, unchanged), then
``stator bench --scenario throughput --processes 1`` moving N/3 rows through three no-op
states (N transitions, each a claim, a handler call and a fenced write-back, as each of
graphile-worker's jobs is a claim, a task call and a completion).  Rounds alternate so a busy
moment hurts both; the table gives each round and the medians.

Run with the peers' virtualenv (benchmarks/peers/setup.sh) and point ``--stator`` at the
``stator`` command of a virtualenv that has Stator installed:

    benchmarks/peers/.venv/bin/python benchmarks/peers/versus.py \\
        --stator .venv/bin/stator [--jobs 60000] [--rounds 3] [--plain-rows]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import run as peers  # benchmarks/peers/run.py, beside this file

ROOT = Path(__file__).resolve().parents[2]
GRAPHILE = next(v for v in peers.VARIANTS if v.system == "graphile-worker" and v.name == "batched")


def stator_rates(stator: str, pg: str, rows: int, plain_rows: bool) -> dict[str, float]:
    """One ``stator bench`` throughput run on PostgreSQL: transitions/s by the objects the
    handlers got (ORM rows; with ``plain_rows`` plain rows too, measured in turn)."""
    command = [stator, "bench", "--db", pg, "--scenario", "throughput", "--processes", "1",
               "--rows", str(rows), "--json"]
    if plain_rows:
        command.append("--plain-rows")
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"versus: stator bench failed:\n{done.stderr[-2000:]}")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    rates = {line["objects"]: float(line["transitions_per_second"])
             for line in lines if line.get("scenario") == "throughput"}
    if not rates:
        raise SystemExit(f"versus: stator bench printed no throughput line:\n{done.stdout}")
    return rates


def graphile_rate(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """One graphile-worker [batched] drain, measured exactly as run.py measures it."""
    outcome = peers.measure(GRAPHILE, args, env)
    if outcome.record is None:
        raise SystemExit(f"versus: graphile-worker [batched] {outcome.problem}")
    return outcome.record


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stator", default=shutil.which("stator") or "stator",
                        help="the stator command to measure (default: the one on PATH)")
    parser.add_argument("--pg", default=peers.DEFAULT_PG, help="PostgreSQL maintenance URL")
    parser.add_argument("--jobs", type=int, default=60_000,
                        help="graphile-worker jobs and Stator transitions per round (default "
                             "60,000: Stator moves a third as many rows, three steps each)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--plain-rows", action="store_true",
                        help="Stator's handlers take plain rows (StateGraph.plain_rows)")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    if args.jobs < 3 or args.rounds < 1:
        parser.error("--jobs must be at least 3 and --rounds at least 1")
    args.explicit = True
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    stator_url = args.pg if "+" in args.pg.split("://")[0] else args.pg.replace(
        "postgresql://", "postgresql+psycopg://", 1)
    args.pg = peers.plain_url(args.pg)
    env = peers.environment_facts(args, [GRAPHILE])
    if missing := peers.graphile_available():
        print(f"versus: {missing}", file=sys.stderr)
        return 1
    rows = args.jobs // 3
    kinds = ["orm", "plain"] if args.plain_rows else ["orm"]
    seen: dict[str, list[float]] = {"graphile": [], **{k: [] for k in kinds}}
    heads = "".join(f" {'stator ' + k + ' /s':>17} {'ratio':>6}" for k in kinds)
    print(f"{'round':>5} {'graphile jobs/s':>16}{heads} {'load':>5}", flush=True)
    for number in range(1, args.rounds + 1):
        load = os.getloadavg()[0]
        graphile = float(graphile_rate(args, env)["jobs_per_second"])
        ours = stator_rates(args.stator, stator_url, rows, args.plain_rows)
        seen["graphile"].append(graphile)
        cells = ""
        for kind in kinds:
            seen[kind].append(ours[kind])
            cells += f" {ours[kind]:>17,.0f} {ours[kind] / graphile:>5.2f}x"
        print(f"{number:>5} {graphile:>16,.0f}{cells} {load:>5.2f}", flush=True)
    middle = {name: statistics.median(values) for name, values in seen.items()}
    cells = "".join(f" {middle[k]:>17,.0f} {middle[k] / middle['graphile']:>5.2f}x"
                    for k in kinds)
    print(f"{'median':>5} {middle['graphile']:>16,.0f}{cells}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
