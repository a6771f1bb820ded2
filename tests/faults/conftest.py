"""Fixtures of the fault suite: the real-process helpers of ``tests/processes/``, a
throwaway PostgreSQL cluster for tests that restart the server, and the short / long switch.

Tests marked ``torture`` are the long version: they run only when ``STATOR_TORTURE=1``
(``python benchmarks/torture.py`` sets it); in the normal suite they are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from processes.procs import ProcApp, proc_app, proc_db_url

from .cluster import Cluster, find_bindir, throwaway_cluster

__all__ = ["cluster_app", "pg_cluster", "proc_app", "proc_db_url"]

TORTURE = os.environ.get("STATOR_TORTURE") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "torture: the long fault runs; only with STATOR_TORTURE=1 "
        "(python benchmarks/torture.py)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if TORTURE:
        return
    skip = pytest.mark.skip(reason="long version: run python benchmarks/torture.py")
    for item in items:
        if item.get_closest_marker("torture"):
            item.add_marker(skip)


@pytest.fixture
def pg_cluster() -> Iterator[Cluster]:
    """A private PostgreSQL cluster the test may stop and restart; always deleted after."""
    bindir = find_bindir()
    if bindir is None:
        reason = "no PostgreSQL server binaries (initdb, pg_ctl) to make a throwaway cluster"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    with throwaway_cluster(bindir) as cluster:
        yield cluster


@pytest.fixture
def cluster_app(pg_cluster: Cluster, tmp_path: Path) -> Iterator[ProcApp]:
    """``proc_app`` on the throwaway cluster: its processes are reaped before the cluster
    is stopped and deleted."""
    app = ProcApp(pg_cluster.url, tmp_path)
    try:
        yield app
    finally:
        app.close()
