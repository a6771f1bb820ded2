"""Fixtures for tests whose workers run on hosts made of network namespaces.

``hosts``: a ``Network`` of three namespaces and a bridge; ``net_cluster``: a throwaway
PostgreSQL cluster listening on the bridge's address (trust for that /24 only);
``net_app``: the real-process helpers of ``tests/processes/`` with ``spawn_on(i, …)``, which
starts ``stator run`` inside host i.  Everything is removed at the end, whatever happened:
processes first, then the cluster, then namespaces and links (and ``sweep()`` removes what an
earlier run that died left behind).  Tests skip, with the reason, where namespaces cannot be
made (not root, no ``ip``); in CI they fail instead.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from faults.cluster import Cluster, find_bindir, throwaway_cluster
from processes.procs import STATOR, Proc, ProcApp

from . import hosts_app
from .hosts import Network, unavailable

HOSTS = 3


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def hosts() -> Iterator[Network]:
    reason = unavailable()
    if reason is not None:
        _skip_or_fail(reason)
    network = Network(HOSTS)
    try:
        yield network
    finally:
        network.close()


class NetCluster:
    """The cluster and the URL hosts reach it by."""

    def __init__(self, cluster: Cluster, network: Network) -> None:
        self.cluster = cluster
        self.network = network

    def url_via(self, address: str, port: int) -> str:
        return f"postgresql+psycopg://postgres@{address}:{port}/postgres"

    @property
    def host_url(self) -> str:
        return self.url_via(self.network.address, self.cluster.port)


@pytest.fixture
def net_cluster(hosts: Network) -> Iterator[NetCluster]:
    bindir = find_bindir()
    if bindir is None:
        _skip_or_fail("no PostgreSQL server binaries (initdb, pg_ctl) to make a throwaway cluster")
    assert bindir is not None

    listen = f"127.0.0.1,{hosts.address}"
    with throwaway_cluster(bindir, listen, trust=(f"{hosts.subnet}0/24",)) as cluster:
        yield NetCluster(cluster, hosts)


class NetApp(ProcApp):
    def spawn_on(
        self, network: Network, host: int, url: str, *args: str, sleep: float = 0.0,
        timeout: float = 10.0,
    ) -> Proc:
        """Start ``stator run`` inside host ``host``, reaching PostgreSQL at ``url``."""
        name = f"host{host}-worker-{len(self.procs) + 1}"
        out, err = self.dir / f"{name}.out", self.dir / f"{name}.err"
        env = self.env(sleep, timeout)
        env["STATOR_PROC_DB"] = url
        with out.open("wb") as stdout, err.open("wb") as stderr:
            popen = subprocess.Popen(
                [*network.exec_prefix(host), *STATOR, "run", self.app_ref, *args],
                cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
            )
        proc = Proc(popen, name, out, err)
        self.procs.append(proc)
        return proc


@pytest.fixture
def net_app(net_cluster: NetCluster, tmp_path: Path) -> Iterator[NetApp]:
    app = NetApp(net_cluster.cluster.url, tmp_path, app=hosts_app)
    try:
        yield app
    finally:
        app.close()
