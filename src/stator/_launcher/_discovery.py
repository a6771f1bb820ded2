"""Finding the databases to run: a PostgreSQL server, a SQLite glob, or explicit URLs.

Scanned on every discovery round, so databases created later are picked up and dropped
ones are noticed without restarting the launcher.  A source that cannot be scanned (the
server is down) keeps its last answer: an unreachable server is not a dropped database.

A database name on a server is chosen by whoever may create databases there, not by the
operator: a name made of anything but letters, digits and ``_ - . $`` is skipped (and said so,
once), so no name can carry URL syntax (``?host=…&port=…``) into a key, a log line or a
scheduler's connection.
"""

from __future__ import annotations

import fnmatch
import glob
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sqlalchemy import URL, create_engine, make_url, text
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import NullPool

from .._store._dialects import SqlDialect, dialect_for
from .._urls import shown
from ..errors import ConfigError

log = logging.getLogger("stator.launcher")

SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
GLOB_CHARS = set("*?[")
NAME_PUNCTUATION = "_-.$"  # besides letters and digits, all a discovered database name may hold


@dataclass(frozen=True)
class Target:
    """One database: ``key`` names it everywhere (status, logs, messages; no password)."""

    key: str
    url: URL

    @property
    def backend(self) -> str:
        return self.url.get_backend_name()

    @property
    def dialect(self) -> SqlDialect:
        return dialect_for(self.backend)

    @property
    def path(self) -> Path | None:
        """The database's file, where a database is one (watched for changes)."""
        if self.dialect.database_is_file and self.url.database:
            return Path(self.url.database)
        return None

    @classmethod
    def of(cls, url: URL) -> Target:
        return cls(key=key_of(url), url=url)


def key_of(url: URL) -> str:
    """A database's name in the launcher: its URL without secrets (``_urls.shown``)."""
    return shown(url)


def name_problem(name: str) -> str | None:
    """Why a discovered database name is not launched, or None if it may be.  Only letters,
    digits and ``_ - . $``: anything else (``? & = / @ : % #``, spaces, control characters)
    is URL syntax somewhere, or a way to make a key or a log line say something else."""
    odd = sorted({c for c in name if not (c.isalnum() or c in NAME_PUNCTUATION)})
    if not odd:
        return None
    return f"its name holds {' '.join(repr(c) for c in odd)}"


def normalize(url: str | URL, base: Path | None = None) -> URL:
    """A database URL in the one form the launcher uses: SQLite paths absolute, PostgreSQL
    through psycopg.  ``base`` resolves relative SQLite paths (default: the current
    directory)."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except (ArgumentError, ValueError):
        raise ConfigError(
            f"not a database URL: {shown(url)!r} (try sqlite:///tenants/*.db or "
            "postgresql://host/)"
        ) from None
    try:
        dialect = dialect_for(parsed.get_backend_name())
    except ConfigError:
        raise ConfigError(
            f"the launcher supports sqlite:// and postgresql:// URLs, not {shown(url)!r}"
        ) from None
    canonical = dialect.canonical_url(parsed, str(base or os.getcwd()))
    if canonical is None:
        raise ConfigError(f"the launcher needs SQLite files, not {shown(url)!r}")
    return canonical


class Source(Protocol):
    description: str

    def scan(self) -> dict[str, Target]: ...


class SqliteGlob:
    """Every SQLite file matching a glob (``sqlite:///tenants/*.db``)."""

    def __init__(self, url: URL) -> None:
        self.url = url
        self.pattern = url.database or ""
        self.description = key_of(url)

    def scan(self) -> dict[str, Target]:
        found = {}
        for name in sorted(glob.glob(self.pattern)):
            if name.endswith(SQLITE_SIDE_FILES) or not os.path.isfile(name):
                continue
            target = Target.of(self.url.set(database=os.path.abspath(name)))
            found[target.key] = target
        return found


class PostgresServer:
    """Every database of a server that allows connections and is not a template (as in TimescaleDB),
    optionally only those whose name matches the URL's database part as a glob
    (``postgresql://host/tenant_*``).  A matching name with characters outside
    ``name_problem``'s rule is skipped, with one warning per name."""

    def __init__(self, url: URL) -> None:
        self.url = url
        self.pattern = url.database or "*"
        self.description = key_of(url)
        self.refused: set[str] = set()
        dialect = dialect_for(url.get_backend_name())
        assert dialect.list_databases_sql is not None
        self.list_sql = dialect.list_databases_sql
        self.engine = create_engine(
            url.set(database=dialect.maintenance_database), poolclass=NullPool,
            connect_args={"connect_timeout": 5},
        )

    def scan(self) -> dict[str, Target]:
        with self.engine.connect() as conn:
            names = conn.execute(text(self.list_sql)).scalars().all()
        found = {}
        for name in names:
            if not fnmatch.fnmatchcase(name, self.pattern):
                continue
            problem = name_problem(name)
            if problem is not None:
                self._refuse(name, problem)
                continue
            target = Target.of(self.url.set(database=name))
            found[target.key] = target
        return found

    def _refuse(self, name: str, problem: str) -> None:
        if name in self.refused:
            return
        self.refused.add(name)
        log.warning(
            "skipping database %r on %s: %s; the launcher runs only databases named with "
            "letters, digits and %s (rename it to have it run)", name, self.description,
            problem, " ".join(NAME_PUNCTUATION), extra={"action": "database_refused"},
        )


class Explicit:
    """One database named on the command line; a SQLite file counts only once it exists."""

    def __init__(self, url: URL) -> None:
        self.target = Target.of(url)
        self.description = self.target.key

    def scan(self) -> dict[str, Target]:
        path = self.target.path
        if path is not None and not path.is_file():
            return {}
        return {self.target.key: self.target}


def discover_source(text: str, base: Path | None = None) -> Source:
    """A ``--discover`` argument: a SQLite glob or a PostgreSQL server (with an optional
    database-name pattern)."""
    url = normalize(text, base)
    if dialect_for(url.get_backend_name()).database_is_file:
        return SqliteGlob(url)
    return PostgresServer(url)


def explicit_source(text: str, base: Path | None = None) -> Source:
    """A ``--db`` argument: exactly one database."""
    url = normalize(text, base)
    if Target.of(url).dialect.database_is_file and GLOB_CHARS & set(url.database or ""):
        raise ConfigError(
            f"--db takes one database; use --discover for a glob ({shown(text)})"
        )
    return Explicit(url)
