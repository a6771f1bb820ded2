"""Writes to a SQLite database's files, as the kernel reports them (Linux inotify, through
ctypes): the SQLite listener waits on them instead of waking ten times a second.

They only hint: a commit writes its pages to the ``-wal`` file (or the database file, with a
rollback journal) a moment before it becomes visible to readers, so an event may come before
``PRAGMA data_version`` changes.  The listener therefore looks again a few times after each
event, and keeps a slower poll besides (see ``Listener._poll_sqlite``).  Where inotify is
missing (not Linux) or refused (no watches left, a file system without it), ``open`` gives
None and the listener polls as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import struct
import sys

_IN_MODIFY = 0x002
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_Q_OVERFLOW = 0x4000  # events were lost: count it as a write
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = 0o2000000
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (then the name, NUL-padded)


class FileEvents:
    """Readable (``fileno``) when one of a database's files was written since ``drain``."""

    def __init__(self, fd: int, names: set[str]) -> None:
        self._fd = fd
        self._names = names  # the database's files, within the watched directory

    @classmethod
    def open(cls, path: str) -> FileEvents | None:
        """Events for the SQLite database at ``path``; None where inotify cannot give them."""
        if not sys.platform.startswith("linux") or path.startswith("file:"):
            return None
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        except (OSError, AttributeError):
            return None
        if fd < 0:
            return None
        full = os.path.abspath(path)
        # The directory, not the files: the -wal and -journal files come and go.
        mask = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE
        if libc.inotify_add_watch(fd, os.fsencode(os.path.dirname(full)), mask) < 0:
            os.close(fd)
            return None
        base = os.path.basename(full)
        return cls(fd, {base, f"{base}-wal", f"{base}-journal"})

    def fileno(self) -> int:
        return self._fd

    def drain(self) -> bool:
        """Read the events waiting; whether any was a write to the database's files."""
        written = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return written
            if not data:
                return written
            at = 0
            while at + _HEADER.size <= len(data):
                _wd, mask, _cookie, length = _HEADER.unpack_from(data, at)
                name = data[at + _HEADER.size: at + _HEADER.size + length].rstrip(b"\0")
                at += _HEADER.size + length
                if mask & _IN_Q_OVERFLOW or os.fsdecode(name) in self._names:
                    written = True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
