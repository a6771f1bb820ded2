"""The drivers: the ``Driver`` interface (``interface.py``) every part of the engine holds,
its typed records (``_records.py``), the SQL both drivers share (statements, every difference
between databases in ``_dialects``, Stator's own tables), and the SQLAlchemy driver
(``Store``).  The Django driver (``_django.py``) is imported only where Django is, so it is
not exported here.  Every name is imported when first asked for (``Store`` brings
SQLAlchemy's ORM, which a Django worker, holding only the shared parts, never loads)."""

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from ._bookkeeping import Bookkeeping
    from ._dialects import BEGIN_OPTION, NOTIFY_CHANNEL, SqlDialect, dialect_for
    from ._read_records import ErrorRecord, ModelStats, StateCount, WorkerRecord
    from ._records import EdgeCount, Heartbeat, StatsPeriod
    from ._store import Store
    from ._tracked import TrackedModel
    from .interface import Driver

# Each name is imported when first asked for: most of the package stands on SQLAlchemy, and
# a Django process that only loads its apps reaches in here for the dialects' spelling of
# a time (``_dialects``), which needs none of it.
_HOME = {
    "Bookkeeping": "._bookkeeping",
    "BEGIN_OPTION": "._dialects",
    "NOTIFY_CHANNEL": "._dialects",
    "SqlDialect": "._dialects",
    "dialect_for": "._dialects",
    "EdgeCount": "._records",
    "ErrorRecord": "._read_records",
    "Heartbeat": "._records",
    "ModelStats": "._read_records",
    "StateCount": "._read_records",
    "StatsPeriod": "._records",
    "WorkerRecord": "._read_records",
    "Store": "._store",
    "TrackedModel": "._tracked",
    "Driver": ".interface",
}

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


__getattr__ = lazy_names(__name__, _HOME, globals())
