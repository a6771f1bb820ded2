"""Scenario 7, memory: the worker's resident memory sampled over a million transitions.

One worker process drains the three-step graph and samples its own RSS in a thread.  The
first quarter of the run is warm-up (pools, caches, prepared statements fill up); growth is
the median of the last quarter of the samples minus the median of the second quarter, and
memory counts as flat when that is under ``FLAT_MB`` (a leak of even a few bytes per
transition shows as megabytes over a million transitions).
"""

from __future__ import annotations

import statistics
from typing import Any

from ._child import ChildSpec, children
from ._common import Context, Result, bench_rows, result

FLAT_MB = 2.0
KEEP_SAMPLES = 60  # samples kept in the result, for plots


def run(ctx: Context) -> list[Result]:
    transitions = ctx.sizes.memory_transitions
    rows = -(-transitions // 3)
    ctx.progress(f"memory: RSS over {rows * 3:,} transitions")
    with ctx.server.place("memory") as place, bench_rows(place, rows):
        spec = ChildSpec(url=place.url, mode="drain", models=["BenchRow"],
                         concurrency=ctx.concurrency, batch_size=ctx.batch_size,
                         sample_every=ctx.sizes.memory_sample_every)
        with children([spec], ctx.folder) as (child,):
            child.send("go")
            report = child.expect("result", timeout=300 + rows * 3 / 200)["result"]
            child.finish()
    return [_summarise(ctx, report)]


def _summarise(ctx: Context, report: dict[str, Any]) -> Result:
    samples: list[list[float]] = report["rss"]
    values = [mb for _t, mb in samples]
    quarter = max(len(values) // 4, 1)
    settled = statistics.median(values[quarter:2 * quarter] or values)
    late = statistics.median(values[-quarter:])
    growth = late - settled
    step = max(len(samples) // KEEP_SAMPLES, 1)
    return result(
        "memory", ctx.backend, transitions=report["transitions"], seconds=report["seconds"],
        transitions_per_second=report["transitions"] / report["seconds"],
        samples=len(values), rss_first_mb=values[0], rss_settled_mb=settled,
        rss_last_mb=values[-1], rss_max_mb=max(values), growth_mb=growth,
        flat=growth < FLAT_MB, rss_series=samples[::step],
    )
