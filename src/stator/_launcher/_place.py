"""The control place: a directory where a launcher keeps what others need to find.

``lock``      held with ``flock`` while a launcher runs: a second launcher on the same place
              refuses to start, and ``launcher-status`` can tell a live launcher from a
              stale state file
``state.json`` each database's state, slot, scheduler pid, uptime, restarts and last error;
              rewritten (atomically) whenever it changes
``wake``      a FIFO: ``stator ctl`` writes the database URL into it after committing a
              message, so a local launcher reads that database's messages at once
``logs/``     each scheduler's output, one file per database
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from ..errors import ConfigError

try:
    import fcntl
except ImportError:  # Windows: no flock, FIFOs or process sessions
    raise ImportError(
        "the Stator launcher needs a POSIX system (Linux, macOS, BSD): fcntl is missing here"
    ) from None

DEFAULT_PLACE = Path(".stator-launcher")


class LauncherRunning(ConfigError):
    """Another launcher holds this control place."""


class Place:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.lock_path = self.path / "lock"
        self.state_path = self.path / "state.json"
        self.wake_path = self.path / "wake"
        self.logs = self.path / "logs"
        self._lock_fd: int | None = None
        self._wake_fds: tuple[int, int] | None = None

    # -- the lock --------------------------------------------------------------------------

    def acquire(self) -> None:
        """Hold the control place for this process, or raise ``LauncherRunning``."""
        try:
            self.logs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot use control place {self.path}: {exc}") from None
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = _read_pid(self.lock_path)
            who = f" (pid {holder})" if holder else ""
            raise LauncherRunning(
                f"another launcher{who} is running with control place {self.path}; stop it "
                "first, or give this one its own --control PATH"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def release(self) -> None:
        self.close_wake()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    def held_by_someone(self) -> bool:
        """True if a live launcher holds this place (for readers like launcher-status)."""
        if not self.lock_path.exists():
            return False
        fd = os.open(self.lock_path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)
        return False

    # -- the state file --------------------------------------------------------------------

    def write_state(self, state: dict[str, Any]) -> None:
        tmp = self.state_path.with_name(f".state.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, indent=1, default=str))
        os.replace(tmp, self.state_path)

    def read_state(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {self.state_path}: {exc}") from None
        except RecursionError:
            raise ConfigError(f"cannot read {self.state_path}: nested too deep") from None
        if not isinstance(data, dict):
            raise ConfigError(f"cannot read {self.state_path}: not a JSON object")
        return data

    def log_path(self, key: str) -> Path:
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", key.split("://", 1)[-1]).strip("_")[-60:]
        digest = hashlib.sha1(key.encode()).hexdigest()[:8]
        return self.logs / f"{slug}-{digest}.log"

    # -- the wake-up FIFO ------------------------------------------------------------------

    def open_wake(self) -> int:
        """Create and open the wake-up FIFO for reading; returns the fd to select on."""
        if self.wake_path.exists() and not stat.S_ISFIFO(self.wake_path.stat().st_mode):
            self.wake_path.unlink()
        if not self.wake_path.exists():
            os.mkfifo(self.wake_path, 0o600)
        reader = os.open(self.wake_path, os.O_RDONLY | os.O_NONBLOCK)
        # Our own writer keeps the FIFO from reading as end-of-file (always readable)
        # whenever the last outside writer closes it.
        writer = os.open(self.wake_path, os.O_WRONLY | os.O_NONBLOCK)
        self._wake_fds = (reader, writer)
        return reader

    def read_wake(self) -> list[str]:
        """The database URLs written to the FIFO since the last call."""
        if self._wake_fds is None:
            return []
        chunks = []
        while True:
            try:
                chunk = os.read(self._wake_fds[0], 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        lines = b"".join(chunks).decode(errors="replace").splitlines()
        return [line.strip() for line in lines if line.strip()]

    def close_wake(self) -> None:
        if self._wake_fds is not None:
            for fd in self._wake_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._wake_fds = None


def poke(place: Path, key: str) -> bool:
    """Tell a launcher running on ``place`` to read ``key``'s messages now.  Best effort:
    False if no launcher listens there (it will still find the message when it polls)."""
    path = Path(place) / "wake"
    try:
        if not stat.S_ISFIFO(path.stat().st_mode):
            return False
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no such FIFO, or nobody reading it (ENXIO)
        return False
    try:
        os.write(fd, f"{key}\n".encode()[:4000])  # under PIPE_BUF: written whole or not at all
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
