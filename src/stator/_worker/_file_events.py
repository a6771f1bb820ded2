"""Writes to a SQLite database's files, as the kernel reports them (Linux inotify, through
``inotify_simple``): the SQLite listener waits on them instead of waking ten times a second.

They only hint: a commit writes its pages to the ``-wal`` file (or the database file, with a
rollback journal) a moment before it becomes visible to readers, so an event may come before
``PRAGMA data_version`` changes.  The listener therefore looks again a few times after each
event, and keeps a slower poll besides (see ``Listener._poll_sqlite``).  Where inotify is
missing (not Linux) or refused (no watches left, a file system without it), ``open`` gives
None and the listener polls as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any

log = logging.getLogger("stator.worker")

# What counts as a write: a commit appends to the -wal file (or rewrites the database file),
# a checkpoint or a rollback journal creates, renames or closes one; an overflowed queue lost
# events, so it counts as one too.
_WRITES = ("MODIFY", "CLOSE_WRITE", "MOVED_TO", "CREATE")


class FileEvents:
    """Readable (``fileno``) when one of a database's files was written since ``drain``."""

    def __init__(self, inotify: Any, names: set[str], overflow: int) -> None:
        self._inotify = inotify
        self._names = names  # the database's files, within the watched directory
        self._overflow = overflow

    @classmethod
    def open(cls, path: str) -> FileEvents | None:
        """Events for the SQLite database at ``path``; None where inotify cannot give them."""
        if not sys.platform.startswith("linux") or path.startswith("file:"):
            return None
        try:
            from inotify_simple import INotify, flags
        except ImportError:  # the dependency is Linux-only; an install without it polls
            _without("inotify_simple is not installed (pip install inotify_simple)")
            return None
        mask = 0
        for name in _WRITES:
            mask |= flags[name]
        full = os.path.abspath(path)
        try:
            inotify = INotify(nonblocking=True)
        except OSError as exc:
            _without(f"inotify refused: {exc}")
            return None
        try:
            # The directory, not the files: the -wal and -journal files come and go.
            inotify.add_watch(os.path.dirname(full), mask)
        except OSError as exc:  # no watches left, or a file system without inotify
            inotify.close()
            _without(f"cannot watch {os.path.dirname(full)}: {exc}")
            return None
        base = os.path.basename(full)
        return cls(inotify, {base, f"{base}-wal", f"{base}-journal"}, int(flags.Q_OVERFLOW))

    def fileno(self) -> int:
        return int(self._inotify.fileno())

    def drain(self) -> bool:
        """Read the events waiting; whether any was a write to the database's files."""
        written = False
        while True:
            try:
                events = self._inotify.read(timeout=0)
            except BlockingIOError:
                return written
            if not events:
                return written
            for event in events:
                if event.mask & self._overflow or event.name in self._names:
                    written = True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._inotify.close()


def _without(reason: str) -> None:
    """Say why there are no file events, where there could have been: the worker still
    works, but notices other processes' writes up to 0.1 s later and wakes ten times a
    second, which someone reading its figures should be able to explain."""
    log.info("SQLite wake-ups: no file events (%s); polling the database instead", reason,
             extra={"action": "file_events_unavailable"})
