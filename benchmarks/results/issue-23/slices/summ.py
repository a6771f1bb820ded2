"""Summarise an ``ab.sh`` output file: transitions/s and worker CPU µs per transition, per
database, row kind and side, with the load beside each run.

    python summ.py ab-step1.txt
"""

from __future__ import annotations

import collections
import json
import sys


def main() -> None:
    data: dict[tuple[str, str, str], list[tuple[float, float, str]]] = (
        collections.defaultdict(list))
    side, db, load = "", "", ""
    with open(sys.argv[1]) as lines:
        for line in lines:
            if line.startswith("#"):
                parts = line.split()
                db, side, load = parts[3], parts[4], parts[7]
                continue
            run = json.loads(line)
            data[(db, run["objects"], side)].append(
                (run["transitions_per_second"], run["worker_cpu_s_per_1000"] * 1000, load))
    for key in sorted(data):
        runs = data[key]
        rates = sorted(r[0] for r in runs)
        cpus = sorted(r[1] for r in runs)
        shown = " | ".join(f"{t:,.0f}/s {c:.1f}us (load {lo})" for t, c, lo in runs)
        print(key, shown, f"| median {rates[len(runs) // 2]:,.0f}/s {cpus[len(runs) // 2]:.1f}us")


if __name__ == "__main__":
    main()
