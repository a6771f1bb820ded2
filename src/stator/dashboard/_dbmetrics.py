"""``/metrics``: gauges read from the database at scrape time, through the same counting
code as the pages and ``stator status`` (``_store._dashboard``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .._schedule_ops import schedule_report
from .._stator import Stator
from .._status_report import LIVE_AFTER
from .._store import _dashboard


class DatabaseCollector(Collector):
    def __init__(self, stator: Stator, live_after: timedelta = LIVE_AFTER) -> None:
        self.stator = stator
        self.live_after = live_after

    def collect(self) -> Iterator[Metric]:
        store = self.stator.store
        now = self.stator.clock.now()
        # ``model`` is the table's name (stable for existing rules), ``model_label`` what the
        # CLI and pages call it (``shop.Order``).
        labels = ["model", "model_label", "state"]
        named = {t.name: t.label for t in store.tracked}
        rows = GaugeMetricFamily("stator_rows", "Rows per model and state.", labels=labels)
        due = GaugeMetricFamily("stator_due_rows", "Rows due now.", labels=labels)
        oldest = GaugeMetricFamily(
            "stator_oldest_due_seconds", "How late the oldest due row is.", labels=labels)
        failing = GaugeMetricFamily(
            "stator_failing_rows", "Rows that failed at least once in their state.",
            labels=labels)
        estimated = GaugeMetricFamily(
            "stator_counts_estimated", "1 where the counts are planner estimates.",
            labels=["model", "model_label"])
        seen: dict[str, bool] = {}
        counts = _dashboard.state_counts(store, now)
        # Every state of every graph has its series, at zero when it has no rows: an alert
        # rule on a state that is empty at the moment still finds one.
        for c in (c for t in store.tracked for c in _dashboard.every_state(t, counts)):
            key = [c.model, named.get(c.model, c.model), c.state]
            rows.add_metric(key, c.rows)
            due.add_metric(key, c.due)
            first = c.oldest_due
            oldest.add_metric(key, (now - first).total_seconds() if first else 0.0)
            failing.add_metric(key, c.failing)
            seen[c.model] = seen.get(c.model, False) or c.estimated
        for t in store.tracked:
            estimated.add_metric([t.name, t.label], 1.0 if seen.get(t.name) else 0.0)
        workers = GaugeMetricFamily("stator_live_workers", "Workers seen recently.")
        workers.add_metric([], len(_dashboard.live_workers(store, now, self.live_after)))
        paused = GaugeMetricFamily("stator_paused", "1 while a model is paused.",
                                   labels=["model", "model_label"])
        stopped = _dashboard.paused_info(store)
        for t in store.tracked:
            paused.add_metric([t.name, t.label], 1.0 if t.name in stopped else 0.0)
        yield from (rows, due, oldest, failing, estimated, workers, paused)
        yield from _limit_metrics(_dashboard.limit_usage(store, now), named)
        yield from _schedule_metrics(schedule_report(store.engine, now))


def _schedule_metrics(schedules: list[dict[str, Any]]) -> Iterator[Metric]:
    """Per schedule: when it last fired a tick, and how late its due tick is (0 if none)."""
    last = GaugeMetricFamily(
        "stator_schedule_last_run_timestamp_seconds",
        "When the schedule last fired (Unix time; 0 if never).", labels=["schedule"])
    lag = GaugeMetricFamily(
        "stator_schedule_lag_seconds", "How late the schedule's due tick is.",
        labels=["schedule"])
    for s in schedules:
        fired = s["last_fired_at"]
        last.add_metric([s["name"]], datetime.fromisoformat(fired).timestamp() if fired else 0)
        lag.add_metric([s["name"]], s["lag_seconds"])
    yield from (last, lag)


def _limit_metrics(
    limits: list[_dashboard.StateLimit], named: dict[str, str]
) -> Iterator[Metric]:
    """Per limited state: rows running (held under a lease) and how full its fullest limit
    is (the whole state's, or its busiest key's: 1.0 is at the limit)."""
    labels = ["model", "model_label", "state"]
    running = GaugeMetricFamily(
        "stator_running_rows", "Rows held by workers, per state with a concurrency limit.",
        labels=labels)
    saturation = GaugeMetricFamily(
        "stator_limit_saturation",
        "Running / max_running of the fullest limit of a state (its busiest key's).",
        labels=labels)
    # One series per state: a state under several limits (a task's queue and its own) has
    # the same running rows under each, and its fullest limit is the fullest of them.
    by_state: dict[tuple[str, str], tuple[int, float]] = {}
    for limit in limits:
        seen = by_state.get((limit.model, limit.state), (0, 0.0))
        by_state[limit.model, limit.state] = (max(seen[0], limit.running),
                                              max(seen[1], limit.saturation))
    for (model, state), (rows, fullest) in by_state.items():
        key = [model, named.get(model, model), state]
        running.add_metric(key, rows)
        saturation.add_metric(key, fullest)
    yield from (running, saturation)
