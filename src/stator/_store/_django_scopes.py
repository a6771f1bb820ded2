"""The Django driver's handler transactions: a sync handler runs inside ``transaction.atomic``.

If the handler wrote (a statement that changes data, or an ``on_commit`` callback), its fenced
transition is written in that transaction and both commit (slow path); otherwise the block
is rolled back (or kept open for the thread's next handler) and the transition joins a batch.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from django.db import connections, transaction

from .._policy import Write
from ._tracked import TrackedModel
from ._writes import writes
from .interface import ClaimedTask, Driver, HandlerScope


class DjangoScopes:
    def __init__(self, store: Driver, alias: str) -> None:
        self.alias = alias
        # One writer at a time: the write lock is taken at the handler's first write.
        self.sqlite = store.dialect.single_writer
        self._local = threading.local()  # .keep: this thread may keep; .kept: the scope

    def for_thread(self, task: ClaimedTask) -> HandlerScope:
        kept: AtomicScope | None = getattr(self._local, "kept", None)
        if kept is not None:
            self._local.kept = None
            return kept
        keep = self._park if getattr(self._local, "keep", False) else None
        return AtomicScope(self.alias, self.sqlite, keep)

    def keep_between_tasks(self) -> None:
        self._local.keep = True

    def settle(self) -> None:
        kept: AtomicScope | None = getattr(self._local, "kept", None)
        if kept is not None:
            self._local.kept = None
            kept.close()

    def _park(self, scope: AtomicScope) -> None:
        self._local.kept = scope

    def for_async(self, task: ClaimedTask) -> HandlerScope:
        # The async ORM runs in a thread of its own: its writes cannot join a transaction
        # here, so async handlers always take the fast path.
        return _NoScope()


class _NoScope:
    def wrote(self) -> bool:
        return False

    def commit_with(
        self, store: Driver, tracked: TrackedModel, write: Write, worker_id: str
    ) -> bool:
        raise AssertionError("nothing to commit")

    def rollback(self) -> None:
        pass

    def release(self) -> None:
        pass


def _no_begin() -> None:
    """Stands in for Django's ``BEGIN`` at the start of a handler's atomic block on SQLite:
    the transaction begins (``BEGIN IMMEDIATE``) at the handler's first write instead, so
    its reads never hold a snapshot that a concurrent commit would make stale."""


class AtomicScope:
    """A handler's changes: whatever it writes on this thread's Django connection.

    Given ``keep`` (a handler thread's, see ``HandlerScopes.keep_between_tasks``), a scope
    that its handler left untouched is not closed but handed to ``keep``, still open, for the
    thread's next handler: a task that never touches the database then costs no atomic block
    of its own.  Untouched means no statement ran, so no database transaction is open (on
    PostgreSQL none begins before a statement; on SQLite none before the first write), and
    nothing was left for the commit: keeping the block open holds nothing in the database."""

    def __init__(
        self, alias: str, sqlite: bool, keep: Callable[[AtomicScope], None] | None = None
    ) -> None:
        self.alias = alias
        self.conn = connections[alias]
        self._keep = keep
        self._wrote = False
        self._ran = False  # any statement at all, through this connection's cursors
        self._lazy = sqlite and not self.conn.in_atomic_block
        if self._lazy:
            self.conn._start_transaction_under_autocommit = _no_begin
        self._atomic: Any = transaction.atomic(using=alias)
        self._atomic.__enter__()
        self._depth = len(self.conn.atomic_blocks)
        self._watch: Any = self.conn.execute_wrapper(self._observe)
        self._watch.__enter__()
        self._open = True

    def _observe(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self._ran = True
        if not self._wrote and writes(sql):
            self._wrote = True
            if self._lazy:
                raw = self.conn.connection
                if not raw.in_transaction:
                    raw.execute("BEGIN IMMEDIATE")
        return execute(sql, params, many, context)

    def wrote(self) -> bool:
        """Wrote, or asked for something to run on commit (``transaction.on_commit``): then
        the transition commits with it, and the callback runs once both are committed."""
        return self._wrote or bool(self.conn.run_on_commit)

    def commit_with(
        self, store: Driver, tracked: TrackedModel, write: Write, worker_id: str
    ) -> bool:
        if self._lazy and not self.conn.connection.in_transaction:
            self.conn.connection.execute("BEGIN IMMEDIATE")
        with store.engine.connect() as conn:  # this thread's connection: inside the atomic
            lost = bool(store.write(tracked, [write], conn=conn, worker_id=worker_id))
        if lost:
            transaction.set_rollback(True, using=self.alias)
        self._close(None)
        return lost

    def rollback(self) -> None:
        if self._open:
            transaction.set_rollback(True, using=self.alias)
            self._close(None)

    def release(self) -> None:
        if self._open and self._keep is not None and self._untouched():
            self._keep(self)
            return
        self.rollback()

    def close(self) -> None:
        """Close a kept scope (it holds nothing to keep or undo)."""
        if self._open:
            self._close(None)

    def _untouched(self) -> bool:
        """Whether the handler left the block as it found it (see the class docstring)."""
        conn = self.conn
        return not (
            self._ran or conn.run_on_commit or conn.needs_rollback
            or conn.savepoint_ids or len(conn.atomic_blocks) != self._depth
            or conn.connection is None
        )

    def _close(self, exc: BaseException | None) -> None:
        self._open = False
        try:
            self._watch.__exit__(None, None, None)
            self._atomic.__exit__(None, None, None)
        finally:
            if self._lazy:
                with contextlib.suppress(AttributeError):
                    del self.conn._start_transaction_under_autocommit
