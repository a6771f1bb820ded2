"""Field and expression types of ``StatorModel``'s columns.

Both are referenced by migrations, so they take only literal arguments: nothing here may
depend on a state graph (a renamed graph or a removed state must not break old migrations).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models

from .._store._dialects import django_dialect


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
        shown, times = django_dialect(compiler.connection.vendor).django_shown_time(sql)
        return shown, tuple(params) * times

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if isinstance(value, datetime):  # USE_TZ = False: Django's naive times are UTC here
            text = django_dialect(connection.vendor).django_time(value)
            if text is not None:
                return text
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
        return django_dialect(connection.vendor).django_now_plus(self.seconds), []
