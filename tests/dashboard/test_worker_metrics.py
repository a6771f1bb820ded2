"""The worker's own metrics (``stator run --metrics-port``) and the per-edge stats behind the
graph's edge rates, from a real worker run in this process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from stator import Stator, _metrics
from stator._store import _schema

from .flow import Flow


@pytest.fixture
def stator(backend: str, build_models: Callable[..., Any]) -> Iterator[Stator]:
    m = build_models(Flow)
    made = Stator(backend, [m.Order])  # the real clock: a worker runs
    made.migrate()
    with Session(made.engine) as s:
        s.execute(insert(m.Order), [{"id": i, "note": "fail" if i > 20 else "ok"}
                                    for i in range(1, 26)])
        s.commit()
    yield made
    made.dispose()


def samples(registry: Any, name: str) -> list[Any]:
    text = generate_latest(registry).decode()
    return [s for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == name]


def test_worker_counts_transitions_failures_claims_and_handler_times(stator: Stator) -> None:
    registry = _metrics.enable()
    try:
        stator.worker(until_idle=True, idle_window=0.2).run()
    finally:
        _metrics.disable()
    (moved,) = samples(registry, "stator_transitions_total")
    assert (moved.labels, moved.value) == (
        {"model": "orders", "model_label": "Order", "from": "new", "to": "done"}, 20)
    (failed,) = samples(registry, "stator_handler_failures_total")
    assert failed.labels == {
        "model": "orders", "model_label": "Order", "state": "new", "exception": "ValueError"}
    assert failed.value == 5
    (claimed,) = samples(registry, "stator_claim_batch_size_sum")
    assert claimed.value == 25
    (timed,) = samples(registry, "stator_handler_seconds_count")
    assert timed.value == 25
    assert samples(registry, "stator_lease_lost_total")[0].value == 0
    assert samples(registry, "stator_db_errors_total")[0].value == 0


def test_edge_counts_reach_the_stats_without_metrics(stator: Stator) -> None:
    """Metrics off (no port): no Prometheus object exists, and the edge stats still work."""
    stator.worker(until_idle=True, idle_window=0.2).run()
    assert _metrics._prometheus is None
    es = _schema.edge_stats_table
    with stator.engine.connect() as conn:
        rows = conn.execute(
            select(es.c.source, es.c.target, func.sum(es.c.count))
            .group_by(es.c.source, es.c.target)
        ).all()
    assert [tuple(r) for r in rows] == [("new", "done", 20)]
