"""Hosts made of Linux network namespaces, joined by a bridge, with links that can be cut.

``Network(n)`` makes a bridge in the root namespace with the address ``10.213.X.1/24`` (a
private /24 used only inside this machine; X is the first one free) and ``n`` namespaces,
each joined to the bridge by a veth pair and given ``10.213.X.(10+i)``.  A private
PostgreSQL cluster listens on the bridge's address; ``stator run`` processes run inside the
namespaces (``ip netns exec``).  ``cut(i)`` takes host i's end of the bridge down: its packets
go nowhere and its TCP connections hang as over a failed switch; ``restore(i)`` brings it back.
``DelayLine`` starts ``delayline.py`` (latency, jitter, late chunks) in front of PostgreSQL.

Every name starts with ``stn`` and a per-run id; each run writes its id and pid under
``RUNS``, and ``sweep()`` removes whatever a run that is no longer alive left behind.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

PREFIX = "stn"
RUNS = Path(os.environ.get("TMPDIR", "/tmp")) / "stator-netns"
DELAYLINE = Path(__file__).with_name("delayline.py")


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = f"{PREFIX}probe{os.getpid() % 100000}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep() -> list[str]:
    """Remove the namespaces and links of runs whose process is gone; returns their ids."""
    if not RUNS.is_dir():
        return []
    swept = []
    for record in RUNS.iterdir():
        try:
            pid = int(record.read_text().strip() or 0)
        except (OSError, ValueError):
            pid = 0
        if pid and _alive(pid):
            continue
        _remove_run(record.name)
        record.unlink(missing_ok=True)
        swept.append(record.name)
    return swept


def _remove_run(run: str) -> None:
    stem = f"{PREFIX}{run}"
    namespaces = _ip("netns", "list", check=False).stdout.split()
    for name in namespaces:
        if name.startswith(stem):
            _ip("netns", "del", name, check=False)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(stem):
            _ip("link", "del", name, check=False)


def _free_subnet() -> str:
    used = _ip("-o", "-4", "addr", "show", check=False).stdout
    for third in range(7, 255):
        prefix = f"10.213.{third}."
        if prefix not in used:
            return prefix
    raise RuntimeError("no free 10.213.X.0/24 subnet")


class Network:
    """A bridge and ``hosts`` namespaces; ``close()`` removes them all."""

    def __init__(self, hosts: int) -> None:
        sweep()
        RUNS.mkdir(parents=True, exist_ok=True)
        self.run = secrets.token_hex(3)
        (RUNS / self.run).write_text(str(os.getpid()))
        stem = f"{PREFIX}{self.run}"
        self.bridge = f"{stem}br"
        self.subnet = _free_subnet()
        self.address = f"{self.subnet}1"
        self.namespaces = [f"{stem}h{i}" for i in range(hosts)]
        self.links = [f"{stem}v{i}" for i in range(hosts)]
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    def _make(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.address}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, (ns, link) in enumerate(zip(self.namespaces, self.links, strict=True)):
            peer = f"{PREFIX}{self.run}p{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", link, "type", "veth", "peer", "name", peer)
            _ip("link", "set", peer, "netns", ns)
            _ip("link", "set", link, "master", self.bridge)
            _ip("link", "set", link, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", peer, "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{self.host_address(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")

    def host_address(self, i: int) -> str:
        return f"{self.subnet}{10 + i}"

    def exec_prefix(self, i: int) -> list[str]:
        """The argv prefix that runs a command on host i."""
        return ["ip", "netns", "exec", self.namespaces[i]]

    def cut(self, i: int) -> None:
        """Host i's packets go nowhere (its cable pulled at the switch)."""
        _ip("link", "set", self.links[i], "down")

    def restore(self, i: int) -> None:
        _ip("link", "set", self.links[i], "up")

    def close(self) -> None:
        _remove_run(self.run)
        (RUNS / self.run).unlink(missing_ok=True)


class DelayLine:
    """``delayline.py`` in its own process, listening on ``listen`` and forwarding to ``target``."""

    def __init__(
        self, listen: tuple[str, int], target: tuple[str, int], *, delay_ms: float = 0.0,
        jitter_ms: float = 0.0, stall: float = 0.0, stall_ms: float = 200.0,
    ) -> None:
        self.listen = listen
        self.popen = subprocess.Popen(
            [sys.executable, str(DELAYLINE), f"{listen[0]}:{listen[1]}",
             f"{target[0]}:{target[1]}", "--delay", str(delay_ms), "--jitter", str(jitter_ms),
             "--stall", str(stall), "--stall-ms", str(stall_ms)],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        )
        assert self.popen.stdout is not None
        if self.popen.stdout.readline().strip() != "ready":
            self.close()
            raise RuntimeError("the delay line did not start")

    def close(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        if self.popen.stdout is not None:
            self.popen.stdout.close()


def free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])
