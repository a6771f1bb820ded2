"""In-process wake-ups: a committed transition wakes every worker of this process at once.

Workers in other processes are woken by the database (LISTEN/NOTIFY on PostgreSQL, a cheap
``PRAGMA data_version`` poll on SQLite); this hub only saves them from waiting for it when
the application and the worker share a process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from sqlalchemy.engine import URL

from ._urls import shown

_lock = threading.Lock()
_listeners: dict[str, set[Callable[[], None]]] = {}


def key_for(url: URL) -> str:
    """The channel of a database: its URL without secrets (``_urls.shown``)."""
    return shown(url)


def subscribe(key: str, callback: Callable[[], None]) -> None:
    with _lock:
        _listeners.setdefault(key, set()).add(callback)


def unsubscribe(key: str, callback: Callable[[], None]) -> None:
    with _lock:
        _listeners.get(key, set()).discard(callback)


def wake(key: str) -> None:
    with _lock:
        callbacks = list(_listeners.get(key, ()))
    for callback in callbacks:
        callback()
