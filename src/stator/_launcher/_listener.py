"""One thread LISTENing on many PostgreSQL databases at once.

Each watched database gets one autocommit connection listening on two channels: the
launcher's control messages (``stator_launcher``) and the engine's new-work channel
(``stator``).  All the connections are multiplexed with one ``select``; a notification
marks its database and wakes the supervisor.  Connections are only kept for databases that
are not DISABLED, up to ``limit`` of them, so that a stopped database can be dropped
without ``WITH (FORCE)``; the others are read at every discovery round instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import URL

from .. import _backoff
from .._outage import short
from .._store import NOTIFY_CHANNEL
from ._messages import CHANNEL

log = logging.getLogger("stator.launcher")

RETRY_FIRST, RETRY_MAX = 1.0, 60.0
Conns = dict[str, tuple[Any, int]]  # database key -> (connection, its socket)
Retry = dict[str, tuple[float, float]]  # database key -> (not before, next delay)


class Listener:
    def __init__(self, on_notice: Callable[[], None]) -> None:
        self._on_notice = on_notice
        self._lock = threading.Lock()
        self._wanted: dict[str, URL] = {}
        self._work_keys: set[str] = set()
        self._heard: dict[str, set[str]] = {}
        self._connected: set[str] = set()
        self._closed = False
        self._pipe_r, self._pipe_w = os.pipe()
        os.set_blocking(self._pipe_r, False)
        os.set_blocking(self._pipe_w, False)
        self._thread = threading.Thread(target=self._keep_running, name="stator-launcher-listener",
                                        daemon=True)
        self._thread.start()

    # -- the supervisor's side -------------------------------------------------------------

    def want(self, wanted: dict[str, URL], work_keys: set[str]) -> None:
        """Listen on exactly these databases; report new work only for ``work_keys``."""
        with self._lock:
            changed = wanted.keys() != self._wanted.keys()
            self._wanted = dict(wanted)
            self._work_keys = set(work_keys)
        if changed:
            self._kick()

    def take(self) -> dict[str, set[str]]:
        """Databases heard from since the last call, with the channels they spoke on."""
        with self._lock:
            heard, self._heard = self._heard, {}
        return heard

    def listening(self) -> set[str]:
        with self._lock:
            return set(self._connected)

    def close(self) -> None:
        self._closed = True
        self._kick()
        self._thread.join(timeout=5.0)
        for fd in (self._pipe_r, self._pipe_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _kick(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._pipe_w, b"x")

    # -- the thread ------------------------------------------------------------------------

    def _keep_running(self) -> None:
        """Restart the listening loop, with backoff, if it ever dies; the supervisor reads
        every database at each discovery round meanwhile."""
        failures = 0
        while not self._closed:
            try:
                self._run()
                return
            except Exception as exc:
                failures += 1
                delay = _backoff.delay(failures, RETRY_FIRST, RETRY_MAX)
                log.warning("the wake-up listener stopped (%s: %s); restarting it in %gs",
                            type(exc).__name__, short(exc), delay,
                            extra={"action": "listener_died"})
                time.sleep(delay)

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._pipe_r, selectors.EVENT_READ, None)
        conns: Conns = {}
        retry: Retry = {}
        try:
            while not self._closed:
                self._reconcile(selector, conns, retry)
                now = time.monotonic()
                waits = [at - now for at, _ in retry.values()]
                timeout = max(min(waits), 0.0) if waits else None
                heard_any = False
                for key_obj, _events in selector.select(timeout):
                    key = key_obj.data
                    if key is None:
                        with contextlib.suppress(BlockingIOError, OSError):
                            os.read(self._pipe_r, 4096)
                        continue
                    heard_any |= self._read(key, conns, retry, selector)
                if heard_any:
                    self._on_notice()
        finally:
            for conn, _fd in conns.values():
                with contextlib.suppress(Exception):
                    conn.close()
            selector.close()

    def _reconcile(self, selector: selectors.BaseSelector, conns: Conns,
                   retry: Retry) -> None:
        with self._lock:
            wanted = dict(self._wanted)
        for key in list(conns):
            if key not in wanted:
                self._drop(key, conns, selector)
                retry.pop(key, None)
        for key in list(retry):
            if key not in wanted:
                del retry[key]
        now = time.monotonic()
        for key, url in wanted.items():
            if key in conns or (key in retry and retry[key][0] > now):
                continue
            try:
                conn = _listening(url)
            except Exception as exc:
                delay = retry.get(key, (0.0, RETRY_FIRST))[1]
                if key not in retry:
                    log.warning("cannot listen on %s (read at each discovery round "
                                "instead): %s", key, short(exc))
                retry[key] = (now + delay, min(delay * 2, RETRY_MAX))
                continue
            retry.pop(key, None)
            conns[key] = (conn, conn.fileno())
            selector.register(conns[key][1], selectors.EVENT_READ, key)
            with self._lock:
                # Anything committed before we listened: have the supervisor look once.
                self._heard.setdefault(key, set()).add(CHANNEL)
                self._connected = set(conns)
            self._on_notice()

    def _read(self, key: str, conns: Conns, retry: Retry,
              selector: selectors.BaseSelector) -> bool:
        if key not in conns:
            return False
        try:
            channels = {note.channel for note in conns[key][0].notifies(timeout=0)}
        except Exception as exc:
            log.warning("lost the listening connection to %s: %s", key, short(exc))
            self._drop(key, conns, selector)
            retry[key] = (time.monotonic() + RETRY_FIRST, RETRY_FIRST * 2)
            return False
        with self._lock:
            if NOTIFY_CHANNEL in channels and key not in self._work_keys:
                channels.discard(NOTIFY_CHANNEL)  # a busy scheduler's own progress
            if not channels:
                return False
            self._heard.setdefault(key, set()).update(channels)
        return True

    def _drop(self, key: str, conns: Conns, selector: selectors.BaseSelector) -> None:
        conn, fd = conns.pop(key)
        with contextlib.suppress(Exception):
            selector.unregister(fd)
        with contextlib.suppress(Exception):
            conn.close()
        with self._lock:
            self._connected = set(conns)


def _listening(url: URL) -> Any:
    """A connection listening on both channels; closed again if LISTEN fails (a database
    dropped between connect and LISTEN), so no half-set-up connection is left to the GC."""
    conn = _connect(url)
    try:
        conn.execute(f"LISTEN {CHANNEL}")
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
    except BaseException:
        with contextlib.suppress(Exception):
            conn.close()
        raise
    return conn


def _connect(url: URL) -> Any:
    import psycopg

    dialect = url.get_dialect()()
    args, kwargs = dialect.create_connect_args(url)
    kwargs.setdefault("connect_timeout", 5)
    return psycopg.connect(*args, **kwargs, autocommit=True)
