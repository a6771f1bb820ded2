"""Field and expression types of ``StatorModel``'s columns.

Both are referenced by migrations, so they take only literal arguments: nothing here may
depend on a state graph (a renamed graph or a removed state must not break old migrations).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import models

from .._types import to_sqlite_text


class StatorDateTimeField(models.DateTimeField):
    """A ``DateTimeField`` whose SQLite text is always ``YYYY-MM-DD HH:MM:SS.ffffff``.

    Django writes ``str(datetime)``, which drops the fraction when it is zero; the engine
    compares ``state_next`` for equality (it is the claim's fencing token), so every writer
    must spell a time the same way.
    """

    def select_format(self, compiler: Any, sql: str, params: Any) -> tuple[str, Any]:
        """Selected so that a value Python cannot hold reads as the nearest one it can (or,
        garbage SQLite text, as NULL) rather than failing the whole query: raw SQL, a
        migration or another tool can write PostgreSQL's ``infinity``, a year past 9999 or
        ``2026-13-45`` into the column, and one such row must not make every admin page that
        lists it a 500 (the engine itself sets the row aside, see ``_store._unreadable``)."""
        sql, params = super().select_format(compiler, sql, params)
        vendor = compiler.connection.vendor
        if vendor == "postgresql":
            low, high = "'0001-01-02'::timestamptz", "'9999-12-30'::timestamptz"
            return (f"(CASE WHEN {sql} < {low} THEN {low} WHEN {sql} > {high} THEN {high} "
                    f"ELSE {sql} END)", (*params, *params, *params))
        if vendor == "sqlite":  # a time SQLite reads, on a day that exists, before 24:00
            return (f"(CASE WHEN julianday({sql}) IS NOT NULL AND date(julianday(substr("
                    f"{sql}, 1, 10))) = substr({sql}, 1, 10) AND substr({sql}, 12, 2) < '24' "
                    f"THEN {sql} END)", (*params, *params, *params, *params, *params))
        return sql, params

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if connection.vendor == "sqlite" and isinstance(value, datetime):
            if value.tzinfo is None:  # USE_TZ = False: Django's naive times are taken as UTC
                value = value.replace(tzinfo=UTC)
            return to_sqlite_text(value)
        return super().get_db_prep_value(value, connection, prepared)


class NowPlus(models.Func):
    """The database's current UTC time plus a fixed number of seconds (a ``db_default``).

    Spelled as the SQLAlchemy mixin's server default is, so raw inserts sort and compare
    like the engine's own timestamps.
    """

    output_field = StatorDateTimeField()

    def __init__(self, seconds: float = 0.0) -> None:
        super().__init__()
        self.seconds = float(seconds)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NowPlus) and other.seconds == self.seconds

    def __hash__(self) -> int:
        return hash(("NowPlus", self.seconds))

    def deconstruct(self) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
        return "stator.django.fields.NowPlus", (self.seconds,), {}

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        offset = f"{self.seconds:.6f}"
        if connection.vendor == "sqlite":
            if self.seconds:
                return f"(strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+{offset} seconds'))", []
            return "(strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now'))", []
        if self.seconds:
            return f"(CURRENT_TIMESTAMP + interval '{offset} seconds')", []
        return "CURRENT_TIMESTAMP", []
