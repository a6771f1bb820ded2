"""Scenario ``limits``: what a concurrency limit costs.  The same one-step delivery graph
twice in one run, once without a limit and once with at most ``DOMAIN_LIMIT`` running per
domain, rows spread over ``LIMIT_KEYS`` domains.

Reported per graph: transitions per second of one worker process draining the table (with
four handler threads and 1,000 domains the limit itself never binds, so the difference is
what the limited claim's statement costs), and the mean time of one claim of a batch with
``limits_due`` rows due (the claim alone, on the driver, the same twenty batches each).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from .._stator import Stator
from ._child import ChildSpec, children
from ._common import Context, Result, result
from ._models import DOMAIN_LIMIT, Delivery, LimitedDelivery
from ._places import Place, insert_rows

LIMIT_KEYS = 1_000
CLAIMS = 20  # batches timed per table: 20 x 100 = the limited graph's whole room


def run(ctx: Context) -> list[Result]:
    lines = []
    for model in (Delivery, LimitedDelivery):
        lines.append(_throughput(ctx, model))
    for due in ctx.sizes.limits_due:
        for model in (Delivery, LimitedDelivery):
            lines.append(_claim_cost(ctx, model, due))
    return lines


def _filled(place: Place, model: type, rows: int) -> None:
    stator = Stator(place.url, [model])
    try:
        stator.migrate()
        domain = f"'d' || CAST(g % {LIMIT_KEYS} AS VARCHAR(10))"
        insert_rows(stator.engine, model.__tablename__, 1, rows,  # type: ignore[attr-defined]
                    extra={"domain": domain})
    finally:
        stator.dispose()


def _graph(model: type) -> str:
    return "limited" if model is LimitedDelivery else "unlimited"


def _throughput(ctx: Context, model: type) -> Result:
    rows = ctx.sizes.rows
    ctx.progress(f"limits: {rows:,} rows over {LIMIT_KEYS:,} domains, {_graph(model)}")
    with ctx.server.place("limits") as place:
        _filled(place, model, rows)
        spec = ChildSpec(url=place.url, mode="drain", models=[model.__name__],
                         concurrency=ctx.concurrency, batch_size=ctx.batch_size)
        with children([spec], ctx.folder) as (child,):
            child.send("go")
            report = child.expect("result", timeout=120 + rows * 3 / 500)["result"]
            child.finish()
    seconds = report["end"] - report["start"]
    moved = report["transitions"]
    return result(
        "limits", ctx.backend, graph=_graph(model), measure="throughput", rows=rows,
        keys=LIMIT_KEYS, limit=DOMAIN_LIMIT if model is LimitedDelivery else None,
        complete=moved == rows, seconds=seconds,
        transitions_per_second=moved / seconds if seconds > 0 else 0.0,
        worker_cpu_s_per_1000=report["cpu"] / max(moved, 1) * 1000,
    )


def _claim_cost(ctx: Context, model: type, due: int) -> Result:
    ctx.progress(f"limits: claim cost with {due:,} rows due, {_graph(model)}")
    with ctx.server.place("limits") as place:
        _filled(place, model, due)
        stator = Stator(place.url, [model])
        try:
            store = stator.store
            (tracked,) = store.tracked
            now = datetime.now(UTC)
            store.claim(tracked, now, 1)  # connections made, statements prepared
            got, started = 0, time.perf_counter()
            for _ in range(CLAIMS):
                got += len(store.claim(tracked, now, ctx.batch_size))
            spent = time.perf_counter() - started
        finally:
            stator.dispose()
    return result(
        "limits", ctx.backend, graph=_graph(model), measure="claim", rows=due,
        keys=LIMIT_KEYS, limit=DOMAIN_LIMIT if model is LimitedDelivery else None,
        claimed=got, claim_ms=spent / CLAIMS * 1000,
    )
