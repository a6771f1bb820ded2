"""The storage layer: the only place that speaks SQL."""

from ._dialects import BEGIN_OPTION, NOTIFY_CHANNEL, SqlDialect, dialect_for
from ._store import Store
from ._tracked import TrackedModel

__all__ = [
    "BEGIN_OPTION",
    "NOTIFY_CHANNEL",
    "SqlDialect",
    "Store",
    "TrackedModel",
    "dialect_for",
]
