"""Values from outside -- a URL's text, a cursor, a form -- checked before the database is
asked to compare anything with them.

The database would refuse some outright (an integer beyond the column's range, NUL in
PostgreSQL text, a lone surrogate anywhere, a time beyond its calendar): that would be a 500
where the truth is "no such row" or "not a cursor".  Each check raises ``ValueError``.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ._tracked import TrackedModel

if TYPE_CHECKING:
    from .interface import Driver as Store


_INT_BITS = {"smallint": 16, "int2": 16, "smallserial": 16, "integer": 32, "int": 32,
             "int4": 32, "serial": 32, "bigint": 64, "int8": 64, "bigserial": 64}


def parse_pk(store: Store, t: TrackedModel, raw: object) -> Any:
    """A primary key from outside (a URL's text, a cursor's part), typed like the column and
    within its range; ``ValueError`` if no row can have it."""
    column = t.table.c[t.pk]
    spec = column.type.compile(dialect=store.engine.dialect).lower().split("(")[0].strip()
    try:
        python_type: Any = column.type.python_type
    except NotImplementedError:  # a Django column, known by its SQL spelling
        python_type = None
    if python_type is int or (python_type is None and spec in _INT_BITS):
        if isinstance(raw, bool) or not isinstance(raw, int | str):
            raise ValueError("not a key")
        value = int(raw)
        bits = 64 if store.dialect.integers_64_bit else _INT_BITS.get(spec, 64)
        if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise ValueError("beyond the key column's range")
        return value
    if not isinstance(raw, str):
        raise ValueError("not a key")
    if python_type is uuid.UUID or (python_type is None and spec == "uuid"):
        return uuid.UUID(raw)
    return storable_text(store, raw)


def storable_text(store: Store, raw: object) -> str:
    """``raw`` if it is text the database can hold and compare, else ``ValueError``."""
    if not isinstance(raw, str):
        raise ValueError("not text")
    try:
        raw.encode()
    except UnicodeEncodeError:
        raise ValueError("not UTF-8 text") from None
    if "\x00" in raw and not store.dialect.text_holds_nul:
        raise ValueError("PostgreSQL text cannot hold NUL")
    return raw


def parse_time(raw: object) -> datetime:
    """A timezone-aware time from outside (a form, a cursor), else ``ValueError``: a naive one
    could only be compared wrongly, and the database refuses one beyond its calendar."""
    if not isinstance(raw, str):
        raise ValueError("not a time")
    when = datetime.fromisoformat(raw)
    if when.tzinfo is None:
        raise ValueError("a time without its time zone")
    try:
        when.astimezone(UTC)
    except OverflowError:
        raise ValueError("a time beyond the calendar") from None
    return when
