"""A real PgBouncer in transaction-pooling mode in front of a throwaway PostgreSQL cluster.

``pgbouncer``: Debian's ``pgbouncer`` binary (``.ci/run`` installs it), started on a free
port with a configuration of its own; stopped and deleted at the end.  Skips where PgBouncer
is not installed (fails in CI).  ``pooled_app``: the real-process helpers of
``tests/processes/`` on a database reached through it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from faults.cluster import Cluster
from faults.conftest import pg_cluster
from processes.procs import ProcApp

__all__ = ["pg_cluster"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgBouncer:
    def __init__(self, binary: str, cluster: Cluster, root: Path) -> None:
        self.cluster = cluster
        self.root = root
        self.port = _free_port()
        self.log = root / "pgbouncer.log"
        (root / "users.txt").write_text('"postgres" ""\n')
        config = root / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"postgres = host=127.0.0.1 port={cluster.port} dbname=postgres\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {root / 'users.txt'}\n"
            "pool_mode = transaction\nmax_client_conn = 500\ndefault_pool_size = 10\n"
            f"logfile = {self.log}\npidfile = {root / 'pgbouncer.pid'}\n"
        )
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.popen = subprocess.Popen(
            [*as_postgres, binary, str(config)], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if self.popen.poll() is not None or time.monotonic() > deadline:
                    log = self.log.read_text() if self.log.exists() else ""
                    self.close()
                    raise RuntimeError(f"PgBouncer did not start:\n{log}") from None
                time.sleep(0.05)

    def url(self, query: str = "prepare_threshold=none") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres?{query}"

    def close(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


@pytest.fixture
def pgbouncer(pg_cluster: Cluster) -> Iterator[PgBouncer]:
    binary = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
    )
    if binary is None:
        reason = "PgBouncer is not installed (apt-get install pgbouncer)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="stator-pgbouncer-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    bouncer = PgBouncer(binary, pg_cluster, root)
    try:
        yield bouncer
    finally:
        bouncer.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pooled_app(pgbouncer: PgBouncer, tmp_path: Path) -> Iterator[ProcApp]:
    app = ProcApp(pgbouncer.url(), tmp_path)
    try:
        yield app
    finally:
        app.close()
