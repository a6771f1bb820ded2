"""What differs between SQLite and PostgreSQL, and nothing else.

Everything here is a small piece of SQL or a connection setting; the statements built from
these pieces are shared (``_statements.py``).  One module per database (``_sqlite``,
``_postgres``) beside the generic answers (``_base``); this module picks one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Engine

from ._base import NOTIFY_CHANNEL, SqlDialect
from ._postgres import (
    CLIENT_SETTINGS,
    IDLE_FLOOR,
    PostgresDialect,
    array_literal,
    configure_postgres,
    idle_transaction_limit,
    listen_connection,
    with_client_settings,
)
from ._sqlite import BEGIN_OPTION, SqliteDialect, configure_sqlite, is_stator_database, use_wal

__all__ = [
    "BEGIN_OPTION", "CLIENT_SETTINGS", "IDLE_FLOOR", "NOTIFY_CHANNEL", "PostgresDialect",
    "SqlDialect", "SqliteDialect", "array_literal", "configure_postgres", "configure_sqlite",
    "dialect_for", "dialect_named", "django_dialect", "idle_transaction_limit",
    "is_stator_database", "listen_connection", "use_wal", "with_client_settings",
]


def dialect_for(engine_or_name: Engine | str) -> SqlDialect:
    name = engine_or_name if isinstance(engine_or_name, str) else engine_or_name.dialect.name
    if name == "sqlite":
        return SqliteDialect()
    if name == "postgresql":
        return PostgresDialect()
    from ...errors import ConfigError

    raise ConfigError(f"Stator supports SQLite and PostgreSQL, not {name!r}")

def dialect_named(name: str) -> SqlDialect:
    """The dialect of a database named as SQLAlchemy names it, the generic one for another
    (a type compiled for a database Stator does not run on)."""
    return _DJANGO_DIALECTS.get(name) or SqlDialect()


def django_dialect(vendor: str) -> SqlDialect:
    """The dialect of a Django connection's ``vendor``; for a database Stator does not run on
    (another of the project's databases), the generic one: Django's own SQL, unchanged."""
    return _DJANGO_DIALECTS.get(vendor) or SqlDialect()


_DJANGO_DIALECTS: dict[str, SqlDialect] = {d.name: d for d in (SqliteDialect(), PostgresDialect())}
