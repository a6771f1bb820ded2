"""The worker's own counters: Prometheus metrics (``stator run --metrics-port``) and the
per-edge transition counts its stats periods record (the dashboard's edge rates).

The worker calls the functions below at a handful of points, one line each.  Without a
metrics port nothing here builds a Prometheus object: each call is one check of a module
global (per claimed batch, written batch or handler run, never per database row), except
``written``, which counts a written batch's moved rows per edge (about 0.25 µs a row on a
2-core EPYC: the graph page's edge rates need it, metrics port or not).

Metrics (all in one registry of their own, served on the port given):

- ``stator_transitions_total{model,model_label,from,to}``: rows moved along an edge (written,
  fence held)
- ``stator_handler_failures_total{model,model_label,state,exception}``: handler errors and
  timeouts

``model`` is the table's name (kept so existing rules match), ``model_label`` the name the CLI
and the pages use (``shop.Order``; the class name for SQLAlchemy).
- ``stator_handler_seconds``: how long handlers ran (histogram)
- ``stator_claim_batch_size``: rows per non-empty claim (histogram)
- ``stator_lease_lost_total``: results refused because the row's lease was lost
- ``stator_db_errors_total``: database steps that failed (and were retried later)
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .errors import ConfigError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from ._policy import Write
    from ._store._records import EdgeCount


class _Prometheus:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.transitions = Counter(
            "stator_transitions_total", "Rows moved along an edge of their graph.",
            ["model", "model_label", "from", "to"], registry=r,
        )
        self.failures = Counter(
            "stator_handler_failures_total", "Handler errors and timeouts.",
            ["model", "model_label", "state", "exception"], registry=r,
        )
        self.handler = Histogram(
            "stator_handler_seconds", "How long handlers ran.", registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120),
        )
        self.claims = Histogram(
            "stator_claim_batch_size", "Rows per non-empty claim.", registry=r,
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
        )
        self.lost = Counter(
            "stator_lease_lost_total", "Results refused because the lease was lost.",
            registry=r,
        )
        self.db_errors = Counter(
            "stator_db_errors_total", "Database steps that failed (retried later).",
            registry=r,
        )


_prometheus: _Prometheus | None = None
_lock = threading.Lock()
_edges: dict[str, dict[str, dict[tuple[str, str], int]]] = {}  # worker -> model -> edge -> n


def enable() -> CollectorRegistry:
    """Start counting (idempotent); returns the registry the metrics live in."""
    global _prometheus
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ConfigError(
            "metrics need prometheus-client: pip install 'stator-engine[dashboard]'"
        ) from None
    with _lock:
        if _prometheus is None:
            _prometheus = _Prometheus()
        return _prometheus.registry


def serve(port: int, host: str = "0.0.0.0") -> None:
    """Serve the metrics on ``host:port`` from a daemon thread; ``ConfigError`` (one line)
    if the port cannot be had."""
    from prometheus_client import start_http_server

    registry = enable()
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") \
            from None


def disable() -> None:
    """Stop counting (tests)."""
    global _prometheus
    with _lock:
        _prometheus = None


# -- called by the worker --------------------------------------------------------------------


def claimed(rows: int) -> None:
    p = _prometheus
    if p is not None and rows:
        p.claims.observe(rows)


def handler_seconds(seconds: float) -> None:
    p = _prometheus
    if p is not None:
        p.handler.observe(seconds)


def handler_observer() -> Callable[[float], None] | None:
    """``handler_seconds`` for a slice of handler runs: None (nothing to do) without metrics,
    asked once per slice rather than once per row."""
    p = _prometheus
    return None if p is None else p.handler.observe


def db_error() -> None:
    p = _prometheus
    if p is not None:
        p.db_errors.inc()


def lease_lost() -> None:
    """A handler's own transaction found the row no longer held (its commit refused)."""
    p = _prometheus
    if p is not None:
        p.lost.inc()


def written(
    worker_id: str, model: str, label: str, writes: Sequence[Write], lost: Collection[Any]
) -> None:
    """Results reached the database (a written batch, or a handler's own commit);
    ``lost``: the keys whose fence failed."""
    if lost:
        writes = [w for w in writes if w.pk not in lost]
    moved = Counter([(w.fence_state, w.state) for w in writes if w.moved and not w.delete])
    if moved:
        with _lock:
            tally = _edges.setdefault(worker_id, {}).setdefault(model, {})
            for edge, n in moved.items():
                tally[edge] = tally.get(edge, 0) + n
    p = _prometheus
    if p is None:
        return
    from ._failure_log import exception_of

    for (source, target), n in moved.items():
        p.transitions.labels(model, label, source, target).inc(n)
    for w in writes:
        if w.failure is not None:
            exception = exception_of(w.failure.kind, w.failure.message)
            p.failures.labels(model, label, w.fence_state, exception).inc()
    if lost:
        p.lost.inc(len(lost))


def drain_edges(worker_id: str, now: datetime) -> list[EdgeCount]:
    """The worker's edge counts since the last call, as ``stator_edge_stats`` rows."""
    from ._store._records import EdgeCount

    with _lock:
        counts = _edges.pop(worker_id, {})
    return [EdgeCount(worker_id, model, source, target, now, count)
            for model, edges in counts.items() for (source, target), count in edges.items()]
