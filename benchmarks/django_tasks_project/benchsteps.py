"""Steps of the benchmark, each run as ``python benchsteps.py STEP ARG`` in a fresh process;
each prints one JSON object."""

import json
import os
import random
import sys
import time


def setup() -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
    import django

    django.setup()


def enqueue(count: int) -> dict[str, float]:
    """``count`` no-op tasks enqueued inside one transaction."""
    from benchjobs import noop
    from django.db import transaction

    started = time.perf_counter()
    with transaction.atomic():
        for _ in range(count):
            noop.enqueue()
    seconds = time.perf_counter() - started
    return {"enqueued": count, "seconds": seconds, "per_second": count / seconds}


def _timestamps() -> list[tuple[object, object, object]]:
    if os.environ.get("BENCH_BACKEND", "stator") == "stator":
        from stator.django.models import StatorTask as Model
    else:
        from django_tasks_db.models import DBTaskResult as Model
    return list(Model.objects.values_list("enqueued_at", "started_at", "finished_at"))


def drained(_arg: int) -> dict[str, float]:
    """How fast the finished tasks went through: count / (last finish - first start)."""
    rows = [r for r in _timestamps() if r[2] is not None]
    first = min(r[1] for r in rows)
    last = max(r[2] for r in rows)
    seconds = (last - first).total_seconds()
    return {"finished": len(rows), "seconds": seconds, "per_second": len(rows) / seconds}


FIRST_LOOK = 0.03  # seconds after an enqueue before the observer first looks


def trickle(count: int) -> dict[str, object]:
    """Enqueue ``count`` tasks one at a time (each committed), waiting for each to start,
    at random intervals; the pickup latency is start - enqueue of each."""
    from benchjobs import noop

    latencies = []
    for _ in range(count):
        result = noop.enqueue()
        deadline = time.monotonic() + 10
        # The start time is the worker's own record, so when and how often this looks only
        # decides how much the observer's queries compete with the worker and the database
        # (2 cores): not at all during the first FIRST_LOOK, then every 10 ms.
        time.sleep(FIRST_LOOK)
        while time.monotonic() < deadline:
            result.refresh()
            if result.started_at is not None:
                latencies.append((result.started_at - result.enqueued_at).total_seconds())
                break
            time.sleep(0.01)
        time.sleep(random.uniform(0.02, 0.5))  # not in step with a polling worker
    latencies.sort()
    return {"samples": len(latencies), "p50_ms": 1000 * latencies[len(latencies) // 2],
            "p95_ms": 1000 * latencies[int(len(latencies) * 0.95)]}


if __name__ == "__main__":
    setup()
    step, arg = sys.argv[1], int(sys.argv[2])
    print(json.dumps({"enqueue": enqueue, "drained": drained, "trickle": trickle}[step](arg)))
