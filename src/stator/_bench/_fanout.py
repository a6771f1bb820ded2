"""Scenario 8, fan-out (Takahē's hot path): each parent's handler inserts K child rows in
its own session, committed with the parent's transition; the children are Stator rows too
(a no-op step each), so one worker process both creates and processes them.

Reported: parents per second, child rows created per second, and all rows processed (parent
and child transitions) per second, from the worker's start to the last child's transition.
"""

from __future__ import annotations

from .._stator import Stator
from ._child import ChildSpec, children
from ._common import Context, Result, result
from ._models import FanChild, FanParent
from ._places import insert_rows


def run(ctx: Context) -> list[Result]:
    parents, k = ctx.sizes.fanout_parents, ctx.sizes.fanout_children
    ctx.progress(f"fan-out: {parents:,} parents x {k} children")
    with ctx.server.place("fanout") as place:
        stator = Stator(place.url, [FanParent, FanChild])
        try:
            stator.migrate()
            insert_rows(stator.engine, FanParent.__tablename__, 1, parents)
        finally:
            stator.dispose()
        spec = ChildSpec(url=place.url, mode="drain", models=["FanParent", "FanChild"],
                         concurrency=ctx.concurrency, batch_size=ctx.batch_size, fan_out=k)
        with children([spec], ctx.folder) as (child,):
            child.send("go")
            report = child.expect("result", timeout=300 + parents * k / 100)["result"]
            child.finish()
    seconds = report["seconds"]
    moved = report["per_model"]
    parent_moves = moved.get(FanParent.__tablename__, 0)
    child_moves = moved.get(FanChild.__tablename__, 0)
    return [result(
        "fanout", ctx.backend, parents=parents, children_per_parent=k,
        complete=parent_moves == parents and child_moves == parents * k, seconds=seconds,
        parents_per_second=parent_moves / seconds,
        rows_created_per_second=parent_moves * k / seconds,
        rows_processed_per_second=(parent_moves + child_moves) / seconds,
        worker_cpu_s_per_1000=report["cpu"] / max(parent_moves + child_moves, 1) * 1000,
    )]
