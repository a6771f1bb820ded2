"""The top self entries of a ``py-spy record --gil -f raw`` profile, worker threads only
(stacks under ``Worker.run`` or a thread's bootstrap: set-up and imports left out).

    python top_self.py FILE [N]
"""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path


def main() -> None:
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in Path(sys.argv[1]).read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if "Worker.run" not in stack and "Thread._bootstrap" not in stack:
            continue
        leaf = re.sub(r":\d+\)$", ")", stack.split(";")[-1])
        counts[leaf] += int(n)
        total += int(n)
    print(f"samples with the GIL held, worker threads: {total}")
    for name, n in counts.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 10):
        print(f"{100 * n / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
