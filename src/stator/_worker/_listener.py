"""Wake-ups from other processes: a listener thread that calls the worker's ``wake`` when
another process commits work, so an idle worker sleeps until told instead of polling.

PostgreSQL: LISTEN on a connection of its own, proven once by a test notification of its own
(behind a transaction-pooling PgBouncer notifications never arrive: then it polls).  SQLite:
a cheap ``PRAGMA data_version`` check on a connection of its own, which also writes the
worker's heartbeats and stats (``write_unseen``, see ``SqliteWatch``): every SQLITE_POLL
seconds, or, where the kernel reports writes to the database's files (``FileEvents``), at
once after each (and a few times more soon after) and every SQLITE_SLOW_POLL seconds besides.
A stop interrupts the listener's waits through a pipe (``_StopPipe``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from .._outage import Outage
from .._store import NOTIFY_CHANNEL, Bookkeeping
from .._store.interface import Driver
from ._file_events import FileEvents
from ._state import Signals

log = logging.getLogger("stator.worker")

SQLITE_POLL = 0.1  # seconds between cross-process change checks on SQLite (one PRAGMA each)
# With file events: seconds between checks while no write is reported (the safety net for a
# commit whose report came long before it showed), and the pauses between the checks that
# follow each reported write: a commit's pages are written, and reported, before the commit
# shows (after an fsync, with synchronous=FULL: tens of ms).  Writes reported meanwhile go
# back to SQLITE_LOOKS[SQLITE_LOOKS_AGAIN]: checks at most every 20 ms while writes go on.
SQLITE_SLOW_POLL = 1.0
SQLITE_LOOKS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.02, 0.03, 0.05, 0.05)
SQLITE_LOOKS_AGAIN = 4
POLL_WITHOUT_NOTIFY = 1.0  # seconds between looks for new work when notifications fail
PROBE_TIMEOUT = 10.0  # seconds the listener waits for its own test notification
LISTENER_JOIN = 3.0  # seconds run() waits for the listener to end (stop() interrupts it)
LISTEN_WAIT = 1.0  # seconds the listener waits for notifications before looking around


class Listener:
    def __init__(
        self, store: Driver, signals: Signals, wake: Callable[[], None], tables: set[str],
        listen_url: str | None, worker_id: str,
    ) -> None:
        self._store = store
        self._stop = signals.stop
        self._wake = wake
        self._tables = tables  # notification payloads that concern this worker
        self._listen_url = listen_url
        self._worker_id = worker_id
        # Set once this worker's own test notification came back: notifications reach the
        # listener, so a reconnected listener (after a cut, a server restart) needs no new probe.
        # Listener thread only.
        self.notify_proven = False
        self._stop_pipe: _StopPipe | None = None  # readable once stopped (see _notes)
        self._thread: threading.Thread | None = None
        self._watch: SqliteWatch | None = None  # set while the SQLite listener polls

    def write_unseen(self, write: Callable[[Bookkeeping], None]) -> bool:
        """Run ``write`` (the worker's own bookkeeping) on the SQLite listener's connection,
        whose commits do not wake this worker; False if there is none (PostgreSQL, or the
        listener is not polling): then the caller writes as usual.  Any thread."""
        watch = self._watch
        return watch is not None and watch.write(write)

    def start(self) -> None:
        self._stop_pipe = _StopPipe()
        if self._stop.is_set():
            self._stop_pipe.set()
        self._thread = threading.Thread(target=self._main, name="stator-listener", daemon=True)
        self._thread.start()

    def interrupt(self) -> None:
        """Cut the listener's current wait short (the worker is stopping); any thread."""
        if self._stop_pipe is not None:
            self._stop_pipe.set()

    def join(self) -> None:
        """Wait for the listener to end.  It notices the stop within a second; waiting for it
        means no thread of this worker touches the store (its pool, its connections) once
        run returns."""
        if self._thread is None:
            return
        self._thread.join(LISTENER_JOIN)
        if not self._thread.is_alive() and self._stop_pipe is not None:
            self._stop_pipe.close()

    # -- the listener thread ---------------------------------------------------------------

    def _main(self) -> None:
        """Keep a wake-up listener running.  One that dies (whatever the reason) has closed
        what it opened, is said so at WARNING and restarted with backoff; meanwhile the
        coordinator looks for due rows at each retry instead (polling)."""
        try:
            self._keep_listening()
        finally:
            self._store.thread_done()  # the probe's notification used this thread's connection

    def _keep_listening(self) -> None:
        outage = Outage("wake-up listener", first_delay=0.5)
        while not self._stop.is_set():
            try:
                if self._store.listen_notify:
                    self._listen_postgres(outage)
                else:
                    self._poll_sqlite()
                return
            except Exception as exc:
                log.warning("wake-up listener stopped (%s: %s); restarting it with backoff, "
                            "polling for due rows meanwhile", type(exc).__name__, exc,
                            extra={"action": "listener_died"})
                self._stop.wait(outage.failed(exc))
                self._wake()  # poll: anything committed while nobody listened

    def _listen_postgres(self, outage: Outage) -> None:
        tables = self._tables
        while not self._stop.is_set():
            conn = self._store.listen_connection(self._listen_url)
            try:
                conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                outage.recovered()
                self._wake()  # anything committed while we were not listening
                if not self.notify_proven:
                    self._probe(conn, tables)
                while not self._stop.is_set():
                    for note in self._notes(conn, LISTEN_WAIT):
                        if note.payload in tables:
                            self._wake()
            finally:
                with contextlib.suppress(Exception):
                    conn.close()

    def _notes(self, conn: Any, timeout: float) -> list[Any]:
        """The notifications that arrive within ``timeout``; a stop cuts the wait short, so
        a stopping worker does not wait out the listener's timeout."""
        waits = [conn.fileno()]
        if self._stop_pipe is not None:
            waits.append(self._stop_pipe.fileno())
        select.select(waits, [], [], timeout)
        return list(conn.notifies(timeout=0))

    def _probe(self, conn: Any, tables: set[str]) -> None:
        """Send a notification and wait for it, patiently: through a transaction-pooling
        PgBouncer, LISTEN holds for one transaction only and notifications never arrive, but
        on a loaded machine or a slow link they may only be late.  Past PROBE_TIMEOUT the
        worker says so once and polls for new work, while still listening: should the
        notification arrive after all, it goes back to waking on notifications alone."""
        token = f"probe-{self._worker_id}"
        try:
            self._store.send_notification(token)
        finally:
            # Its only use of the store's connections: while it listens, this thread holds
            # none but its LISTEN connection (Django's would stay open until it ends).
            self._store.thread_done()
        started = time.monotonic()
        polling = False
        while not self._stop.is_set():
            for note in self._notes(conn, POLL_WITHOUT_NOTIFY):
                if note.payload == token:
                    self.notify_proven = True
                    if polling:
                        log.warning(
                            "wake-up listener: notifications arrive after all (%.0fs late); "
                            "no longer polling", time.monotonic() - started,
                            extra={"action": "listen_notified"},
                        )
                    return
                if note.payload in tables:
                    self._wake()
            if not polling and time.monotonic() - started >= PROBE_TIMEOUT:
                polling = True
                log.warning(
                    "wake-up listener: notifications do not arrive over this connection (a "
                    "transaction-pooling PgBouncer in between?); looking for new work every "
                    "%gs instead; give a direct connection with listen_url / --listen-url",
                    POLL_WITHOUT_NOTIFY, extra={"action": "listen_polling"},
                )
            if polling:
                self._wake()

    def _poll_sqlite(self) -> None:
        path = self._store.sqlite_path()
        if not path or path == ":memory:":
            return
        watch = SqliteWatch(path)
        events = FileEvents.open(path)
        try:
            watch.changed()
            self._watch = watch
            looks = len(SQLITE_LOOKS)  # the next of SQLITE_LOOKS after a reported write
            while not self._stop.is_set():
                if events is None:
                    self._stop.wait(SQLITE_POLL)
                elif looks < len(SQLITE_LOOKS):
                    self._stop.wait(SQLITE_LOOKS[looks])
                    looks += 1
                    if events.drain():  # more writes: look again soon, never all the time
                        looks = min(looks, SQLITE_LOOKS_AGAIN)
                elif self._written(events, SQLITE_SLOW_POLL):
                    looks = 0  # checked at once, and again after each of SQLITE_LOOKS
                if not self._stop.is_set() and watch.changed():
                    self._wake()
        finally:
            self._watch = None
            watch.close()
            if events is not None:
                events.close()

    def _written(self, events: FileEvents, timeout: float) -> bool:
        """Wait up to ``timeout`` for a write to the database's files (a stop cuts it short);
        whether one was reported."""
        waits = [events.fileno()]
        if self._stop_pipe is not None:
            waits.append(self._stop_pipe.fileno())
        readable, _, _ = select.select(waits, [], [], timeout)
        return events.fileno() in readable and events.drain()


class SqliteWatch:
    """The SQLite listener's connection.  ``changed`` reads ``PRAGMA data_version``, which
    changes when any other connection commits, and by SQLite's definition never for this
    connection's own commits: the worker's heartbeats and stats written here (``write``)
    do not wake it for a claim round that finds nothing, while a commit of any other
    connection (new work), even one that lands at the same moment as our own, still does.
    Its reads and writes take turns (one lock), from the listener's and the worker's threads."""

    def __init__(self, path: str) -> None:
        conn = sqlite3.connect(path, check_same_thread=False, uri=path.startswith("file:"))
        self._conn = conn
        self._lock = threading.Lock()
        self._closed = False
        self._last: int | None = None
        self._books = Bookkeeping.on_sqlite_connection(conn)

    def changed(self) -> bool:
        """Whether another connection committed since the last call (False the first time)."""
        with self._lock:
            (version,) = self._conn.execute("PRAGMA data_version").fetchone()
        changed = self._last is not None and version != self._last
        self._last = version
        return changed

    def write(self, write: Callable[[Bookkeeping], None]) -> bool:
        """Run ``write`` on this connection; False once closed (nothing written)."""
        with self._lock:
            if self._closed:
                return False
            write(self._books)
            return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._books.engine.dispose()
            self._conn.close()


class _StopPipe:
    """A pipe that becomes readable on stop: the listener's waits include it."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        self._closed = False
        # Held while writing or closing: a write after close could land in a reused fd.
        self._lock = threading.Lock()

    def fileno(self) -> int:
        return self._read

    def set(self) -> None:
        with self._lock:
            if not self._closed:
                with contextlib.suppress(OSError):  # full: it is readable already
                    os.set_blocking(self._write, False)
                    os.write(self._write, b".")

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._read)
                os.close(self._write)
