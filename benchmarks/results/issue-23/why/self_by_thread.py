"""Top self entries of a ``py-spy record --gil -f raw`` profile, per worker thread (told
apart by the thread's entry frame): the handler threads, the claim thread (db-calls), the
writer, the coordinator.

    python self_by_thread.py FILE [N]
"""

from __future__ import annotations

import collections
import re
import sys

ENTRY = {"HandlerPool._handle_tasks": "handlers", "Calls._main": "db-calls (claims)",
         "Writer._write_batches": "writer", "Worker.run": "coordinator",
         "Listener._main": "listener"}


def main() -> None:
    per: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    total = 0
    for line in open(sys.argv[1]):
        stack, _, n = line.rstrip().rpartition(" ")
        frames = stack.split(";")
        thread = next((t for f in frames for k, t in ENTRY.items() if f.startswith(k + " ")), None)
        if thread is None:
            continue
        leaf = re.sub(r":\d+\)$", ")", frames[-1])
        per[thread][leaf] += int(n)
        total += int(n)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    print(f"samples with the GIL held, worker threads: {total}")
    for thread, counts in sorted(per.items(), key=lambda kv: -sum(kv[1].values())):
        n = sum(counts.values())
        print(f"\n{thread}: {n} samples, {100 * n / total:.1f}% of the GIL-held time")
        for name, k in counts.most_common(top):
            print(f"  {100 * k / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
