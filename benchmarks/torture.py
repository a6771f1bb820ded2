"""The long version of the fault suite (``tests/faults/``), with a report.

    python benchmarks/torture.py                        # SQLite and PostgreSQL, default sizes
    python benchmarks/torture.py --backend postgresql --rows 10000 --workers 4 --kills 20

Runs ``tests/faults/test_torture.py`` (skipped in the normal suite) through pytest with
``STATOR_TORTURE=1``: many rows through a three-step graph, several worker processes, random
SIGKILLs (from outside, and workers killing themselves just before or just after a commit),
and between them restarts of a throwaway PostgreSQL cluster (clean and crash) or, on SQLite,
the write lock held past the workers' busy timeout.  Every row is checked at the end; the
report gives rows, processes, kills, database restarts, rows lost (must be 0), transitions
applied twice (must be 0) and the longest recovery.  PostgreSQL needs the server binaries
(``initdb``, ``pg_ctl``): the run makes a cluster of its own and deletes it afterwards.
Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/faults/test_torture.py::test_torture"

COLUMNS = [
    ("backend", "backend"),
    ("rows", "rows"),
    ("processes", "worker processes"),
    ("kills", "SIGKILLs"),
    ("kills_in_flight", "…with handlers in flight"),
    ("kills_mid_write", "…mid-write"),
    ("db_restarts", "database restarts"),
    ("lock_holds", "SQLite lock holds"),
    ("rows_lost", "rows lost"),
    ("applied_twice", "transitions applied twice"),
    ("handler_reruns", "handler re-runs (allowed)"),
    ("lost_writes", "fenced writes refused"),
    ("longest_recovery", "longest recovery (s)"),
    ("longest_rerun", "longest until re-run (s)"),
    ("lease", "lease (s)"),
    ("seconds", "run time (s)"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs in all (a quarter "
                        "of them self-inflicted at a random commit)")
    parser.add_argument("--restarts", type=int, default=2, help="PostgreSQL restarts")
    parser.add_argument("--locks", type=int, default=2, help="SQLite lock holds")
    parser.add_argument("--flaky", type=int, default=0, metavar="N", help="every N-th row: "
                        "step b says 'not yet' once and step c fails once")
    parser.add_argument("--overrun", type=int, default=0, metavar="N", help="every N-th "
                        "row: step a's first attempt overruns its deadline")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="stator-torture-") as tmp:
        report = Path(tmp) / "report.jsonl"
        env = {
            **os.environ, "STATOR_TORTURE": "1", "STATOR_TORTURE_REPORT": str(report),
            "STATOR_TORTURE_ROWS": str(args.rows), "STATOR_TORTURE_WORKERS": str(args.workers),
            "STATOR_TORTURE_KILLS": str(args.kills),
            "STATOR_TORTURE_RESTARTS": str(args.restarts),
            "STATOR_TORTURE_LOCKS": str(args.locks),
            "STATOR_TORTURE_FLAKY": str(args.flaky), "STATOR_TORTURE_OVERRUN": str(args.overrun),
        }
        command = [sys.executable, "-m", "pytest", TEST, "-p", "no:cacheprovider", "-q", "-s"]
        if args.backend != "both":
            command += ["-k", args.backend]
        code = subprocess.call(command, cwd=ROOT, env=env)
        results = [json.loads(line) for line in report.read_text().splitlines()] if (
            report.exists()) else []
    print_report(results)
    return code


def print_report(results: list[dict[str, Any]]) -> None:
    print("\nstator torture report")
    if not results:
        print("  (no run finished: see the pytest output above)")
        return
    width = max(len(title) for _key, title in COLUMNS)
    for key, title in COLUMNS:
        cells = []
        for result in results:
            value = result[key]
            cells.append(f"{value:.1f}" if isinstance(value, float) else str(value))
        print(f"  {title:<{width}}  " + "  ".join(f"{c:>12}" for c in cells))
    print("  recovery: until a dead worker's rows were due again (or running again elsewhere),"
          " or commits resumed after an outage;\n  re-run: until every handler in flight at "
          "the fault was committed again (includes waiting behind rows due earlier)")
    for result in results:
        slowest = sorted(result["recoveries"], key=lambda r: -r[1])[:3]
        print(f"  [{result['backend']}] slowest recoveries: " + "; ".join(
            f"{cause}: {recovered:.1f}s (re-run {rerun:.1f}s)"
            for cause, recovered, rerun in slowest
        ))
    for result in results:
        recovered = sorted(r[1] for r in result["recoveries"])
        if recovered:
            print(f"  [{result['backend']}] recovery after {len(recovered)} faults: p50 "
                  f"{statistics.median(recovered):.1f}s, max {recovered[-1]:.1f}s")
    bad = [r for r in results if r["rows_lost"] or r["applied_twice"]]
    print("  verdict: " + ("FAILED: rows lost or transitions applied twice" if bad
                           else "nothing lost, nothing applied twice"))


if __name__ == "__main__":
    sys.exit(main())
