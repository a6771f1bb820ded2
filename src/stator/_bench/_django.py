"""Scenario ``django``: the Django store against the SQLAlchemy store, same database, same run.

Both drain ``rows`` rows through the throughput scenario's three no-op steps with one worker
process of the same concurrency and batch size: the SQLAlchemy side is the throughput
scenario's own one-process run; the Django side is a child process that sets Django up over
the same database (``python -m stator._bench._django_child``), fills its table with
``bulk_create`` and runs the worker ``manage.py runstator`` runs.  Reported: transitions/s of
each and their ratio (issue #9 asks for the Django store within 0.8x).  With
``--plain-rows``, the Django side also drains the steps with plain rows, in turn with the ORM
rows' run (``django_plain_…``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

from ._common import Context, Result, result
from ._throughput import measure as sqlalchemy_run

CHILD = "stator._bench._django_child"


def run(ctx: Context) -> list[Result]:
    if importlib.util.find_spec("django") is None:
        reason = "Django is not installed (pip install 'stator-engine[django]')"
        ctx.progress(f"django: skipped: {reason}")
        return [result("django", ctx.backend, skipped=reason)]
    rows = ctx.sizes.rows
    kinds = ["orm", "plain"] if ctx.plain_rows else ["orm"]
    best: dict[str, dict[str, float]] = {}
    for _ in range(ctx.sizes.repeats):
        for kind in kinds:  # in turn: both kinds see the same load
            measured = _django_once(ctx, rows, kind)
            if kind not in best or measured["per_second"] > best[kind]["per_second"]:
                best[kind] = measured
    best_django = best["orm"]
    sqlalchemy = sqlalchemy_run(ctx, 1)
    sa_rate = float(sqlalchemy["transitions_per_second"])
    plain = best.get("plain")
    extra = {} if plain is None else {
        "django_plain_transitions_per_second": plain["per_second"],
        "django_plain_worker_cpu_s_per_1000": plain["cpu_per_1000"],
    }
    return [result(
        "django", ctx.backend, rows=rows, concurrency=ctx.concurrency,
        django_transitions_per_second=best_django["per_second"],
        sqlalchemy_transitions_per_second=sa_rate,
        django_to_sqlalchemy=best_django["per_second"] / sa_rate if sa_rate else 0.0,
        django_worker_cpu_s_per_1000=best_django["cpu_per_1000"],
        complete=all(b["transitions"] == rows * 3 for b in best.values()),
        **extra,
    )]


def _django_once(ctx: Context, rows: int, kind: str = "orm") -> dict[str, float]:
    ctx.progress(f"django: {rows:,} rows through the Django store, one worker process, "
                 f"{kind} rows")
    with ctx.server.place("django") as place:
        done = subprocess.run(
            [sys.executable, "-m", CHILD, str(rows), str(ctx.concurrency), str(ctx.batch_size),
             kind],
            env=dict(os.environ, STATOR_BENCH_DB=place.url), capture_output=True, text=True,
            check=False, timeout=600 + rows / 100,
        )
    if done.returncode != 0:
        from ._child import BenchError

        raise BenchError(f"the Django benchmark child failed:\n{done.stderr[-2000:]}")
    report: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return report
