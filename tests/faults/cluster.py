"""A throwaway PostgreSQL cluster that a test may stop, crash and restart.

The shared server the rest of the suite uses is never restarted; a test that restarts
PostgreSQL gets a private cluster instead: ``initdb`` into a fresh directory, a free port,
``pg_ctl`` to start and stop it.  PostgreSQL refuses to run as root, so when the tests run as
root the cluster runs as the ``postgres`` OS user.  ``throwaway_cluster()`` always stops the
cluster and deletes its directory, whatever happens in the test.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg


def find_bindir() -> Path | None:
    """The newest installed PostgreSQL's bin directory (with initdb and pg_ctl), if any."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit()
        else 0,
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """One private PostgreSQL cluster: its directory, port, and start/stop/restart."""

    def __init__(self, bindir: Path, root: Path) -> None:
        self.bindir = bindir
        self.root = root
        self.data = root / "data"
        self.log = root / "server.log"
        self.port = _free_port()
        self.running = False
        self.restarts = 0
        self.listen = "127.0.0.1"  # listen_addresses (tests/netns adds a bridge's address)
        self.trust: list[str] = []  # more networks (CIDR) allowed in without a password
        self._as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, timeout: float = 60.0) -> None:
        done = subprocess.run(
            [*self._as_postgres, *args], capture_output=True, text=True, timeout=timeout,
            check=False, stdin=subprocess.DEVNULL, env={**os.environ, "LC_ALL": "C"},
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}\n"
                f"server log:\n{log}"
            )

    def init(self) -> None:
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
            "-E", "UTF8", "--locale=C", "--no-sync",
        )
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.writelines(f"host all all {network} trust\n" for network in self.trust)

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses={self.listen} -c fsync=off "
            "-c max_connections=300"
        )
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
            "-t", "60", "-o", options, "start",
        )
        self.running = True
        self._wait_ready()

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` (connections terminated, clean shutdown) or ``immediate``
        (a crash: no shutdown checkpoint, recovery from the WAL at the next start)."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w",
                  "-t", "60", "stop")
        self.running = False

    def restart(self, mode: str = "fast", downtime: float = 0.0) -> None:
        self.stop(mode)
        time.sleep(downtime)
        self.start()
        self.restarts += 1

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                                     dbname="postgres", connect_timeout=5):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


@contextmanager
def throwaway_cluster(
    bindir: Path, listen: str = "127.0.0.1", trust: tuple[str, ...] = ()
) -> Iterator[Cluster]:
    """A running private cluster (listening on ``listen``, trusting the ``trust`` networks
    too); stopped and deleted on the way out."""
    root = Path(tempfile.mkdtemp(prefix="stator-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    cluster = Cluster(bindir, root)
    cluster.listen = listen
    cluster.trust = list(trust)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        try:
            if cluster.running or (cluster.data / "postmaster.pid").exists():
                cluster.stop("immediate")
        finally:
            shutil.rmtree(root, ignore_errors=True)
