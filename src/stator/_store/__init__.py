"""The drivers: the ``Driver`` interface (``interface.py``) every part of the engine holds,
its typed records (``_records.py``), the SQL both drivers share (statements, every difference
between databases in ``_dialects``, Stator's own tables), and the SQLAlchemy driver
(``Store``).  The Django driver (``_django.py``) is imported only where Django is, so it is
not exported here.  ``Store`` is imported when first asked for: it brings SQLAlchemy's ORM,
which a Django worker, holding only the shared parts, never loads."""

from typing import TYPE_CHECKING, Any

from ._bookkeeping import Bookkeeping
from ._dialects import BEGIN_OPTION, NOTIFY_CHANNEL, SqlDialect, dialect_for
from ._records import (
    EdgeCount,
    ErrorRecord,
    Heartbeat,
    ModelStats,
    StateCount,
    StatsPeriod,
    WorkerRecord,
)
from ._tracked import TrackedModel
from .interface import Driver

if TYPE_CHECKING:
    from ._store import Store

__all__ = [
    "BEGIN_OPTION",
    "NOTIFY_CHANNEL",
    "Bookkeeping",
    "Driver",
    "EdgeCount",
    "ErrorRecord",
    "Heartbeat",
    "ModelStats",
    "SqlDialect",
    "StateCount",
    "StatsPeriod",
    "Store",
    "TrackedModel",
    "WorkerRecord",
    "dialect_for",
]


def __getattr__(name: str) -> Any:
    if name == "Store":
        from ._store import Store

        return Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
