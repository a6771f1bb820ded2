"""What the launcher itself reads and writes in one database: its pending messages, their
acknowledgements, whether the schema is ready, and when work is next due.

Connections are never pooled here (``NullPool``): a launcher watching two hundred databases
holds no connection to any of them between look-ups, so it never stands in the way of a
``DROP DATABASE`` or uses up a server's connection slots.  SQLite files are opened
read-write but never created: a file that disappeared is not silently brought back empty.
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool

from .._store import BEGIN_OPTION, Store
from . import _messages
from ._discovery import Target

Signature = tuple[tuple[int, int], ...]


class Tenant:
    def __init__(self, target: Target, models: Sequence[type]) -> None:
        self.target = target
        self.engine = _engine(target)
        self.store = Store(self.engine, models)
        self._signature: Signature | None = None

    @property
    def key(self) -> str:
        return self.target.key

    def messages(self, now: datetime) -> list[_messages.Pending]:
        with self.engine.connect() as conn:
            if not _messages.has_table(conn):
                return []
            found = _messages.pending(conn, now)
            conn.commit()  # unknown kinds were refused in place
        return found

    def acknowledge(self, message_id: int, ok: bool, outcome: str, now: datetime) -> None:
        writing = self.engine.connect().execution_options(**{BEGIN_OPTION: "immediate"})
        with writing as conn, conn.begin():
            _messages.acknowledge(conn, message_id, ok, outcome, now)
            _messages.prune(conn, now)

    def problems(self) -> list[str]:
        return self.store.problems()

    def next_due(self) -> datetime | None:
        return self.store.next_due(self.store.tracked)

    def changed(self) -> bool:
        """SQLite: whether the file (or its WAL) changed since the last call -- a commit by
        anyone.  A stat per file; never true on the first call."""
        path = self.target.path
        if path is None:
            return False
        signature: list[tuple[int, int]] = []
        for name in (str(path), f"{path}-wal"):
            try:
                st = os.stat(name)
            except OSError:
                signature.append((0, 0))
            else:
                signature.append((st.st_mtime_ns, st.st_size))
        previous, self._signature = self._signature, tuple(signature)
        return previous is not None and previous != self._signature

    def dispose(self) -> None:
        self.engine.dispose()


def _engine(target: Target) -> Engine:
    path = target.path
    if path is not None:
        uri = f"file:{urllib.parse.quote(str(path), safe='/')}?mode=rw"

        def connect() -> sqlite3.Connection:
            return sqlite3.connect(uri, uri=True, timeout=10.0, check_same_thread=False)

        return create_engine("sqlite://", creator=connect, poolclass=NullPool)
    return create_engine(target.url, poolclass=NullPool, connect_args={"connect_timeout": 5})
