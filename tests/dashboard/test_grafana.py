"""examples/grafana/stator.json queries only metrics Stator really exposes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session

from stator import ManualClock, Stator, _metrics
from stator.dashboard._dbmetrics import DatabaseCollector

from .flow import Flow

GRAFANA = Path(__file__).resolve().parents[2] / "examples" / "grafana" / "stator.json"


def exposed(registry: Any) -> set[str]:
    text = generate_latest(registry).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def exposed_labels(registry: Any) -> set[str]:
    text = generate_latest(registry).decode()
    return {k for f in text_string_to_metric_families(text) for s in f.samples for k in s.labels}


def test_every_panel_queries_an_exposed_metric(
    tmp_path: Path, build_models: Callable[..., Any], clock: ManualClock,
) -> None:
    m = build_models(Flow)
    stator = Stator(f"sqlite:///{tmp_path / 'g.db'}", [m.Order], clock=clock)
    stator.migrate()
    with Session(stator.engine) as s:
        s.add(m.Order(id=1))
        s.commit()
    try:
        names = exposed(_metrics.enable())
        registry = type(_metrics.enable())()
        registry.register(DatabaseCollector(stator))
        names |= exposed(registry)
        labels = exposed_labels(registry)
    finally:
        _metrics.disable()
        stator.dispose()
    # Labelled counters show no sample until first counted: name them from their help.
    names |= {"stator_transitions_total", "stator_handler_failures_total"}
    board = json.loads(GRAFANA.read_text())
    used = {name for panel in board["panels"] for target in panel.get("targets", [])
            for name in re.findall(r"\bstator_\w+", target["expr"])}
    assert used and used <= names, used - names
    assert {"stator_rows", "stator_transitions_total", "stator_handler_seconds_bucket"} <= used
    # Labels grouped, filtered or shown by the board exist (the counters' ones: the same
    # model labels as the gauges, plus their own).
    labels |= {"from", "to", "exception", "le"}
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    grouped = {name.strip() for e in exprs for by in re.findall(r"by \(([^)]*)\)", e)
               for name in by.split(",")}
    filtered = {name for e in exprs for name in re.findall(r"(\w+)=~", e)}
    legends = {name for p in board["panels"] for t in p.get("targets", [])
               for name in re.findall(r"{{(\w+)}}", t.get("legendFormat", ""))}
    assert "model_label" in grouped and grouped | filtered | legends <= labels, (
        (grouped | filtered | legends) - labels)
