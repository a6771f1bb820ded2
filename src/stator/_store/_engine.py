"""The engine the SQLAlchemy driver runs on when the application gives a URL, not an engine:
every refusal one ``ConfigError`` that names the URL without its secrets."""

from __future__ import annotations

from sqlalchemy import URL, Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from .._urls import shown
from ..errors import ConfigError
from ._dialects import dialect_for


def create_engine_for(url: str | URL, concurrency: int) -> Engine:
    """An engine for ``url``, with room in its pool for ``concurrency`` handler threads and
    the worker's own connections."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise ConfigError(
            f"not a database URL: {shown(url)!r} (try sqlite:///file.db or "
            "postgresql+psycopg://user@host/dbname)"
        ) from exc
    try:
        dialect = dialect_for(parsed.get_backend_name())
    except ConfigError:
        raise ConfigError(
            f"Stator supports sqlite:// and postgresql:// URLs, not {shown(url)!r}"
        ) from None
    if dialect.in_memory(parsed):
        # It lives and dies with one connection: the engine's other connections, its worker
        # threads and the other commands would each see an empty one.
        raise ConfigError(
            "an in-memory SQLite database (sqlite:// or :memory:) cannot work with Stator: "
            "each connection would see its own empty database; use a file, "
            "sqlite:///path/to/file.db"
        )
    try:
        return create_engine(
            dialect.engine_url(parsed), pool_size=concurrency + 4,
            max_overflow=concurrency + 4,
        )
    except (NoSuchModuleError, ImportError) as exc:
        raise ConfigError(
            f"cannot use {shown(url)!r}: {exc}; for PostgreSQL install "
            "stator-engine[postgresql]"
        ) from exc
