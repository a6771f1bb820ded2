"""The model's own columns a fenced write sets (``stator_write_columns``): their kinds, and
a batch's values for them, each distinct value encoded once.

A handler may leave values for the row (``obj.stator_extra``, a dict by column name); a
model that names those columns lets the engine set them in the fenced write itself, the
same statement that moves the row on, under the same fence (``_statements``).  So a task's
result costs no statement of its own, and a result whose lease was lost is never written:
the django.tasks backend's start and finish times, return value, errors and worker ids.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from .._policy import Write
from .._time_text import to_sqlite_text

# "time": a datetime (aware), written as the engine writes its own times; "json": any value
# JSON holds, dumped (None stays SQL NULL, as Django's ``JSONField(null=True)`` stores it);
# "value": bound as it is (text, numbers).
KINDS = ("time", "json", "value")

WriteColumns = tuple[tuple[str, str], ...]  # (column, kind), in the statements' order


def checked(model: type, declared: Any, columns: Sequence[str]) -> WriteColumns:
    """``stator_write_columns`` as the model declares it ({column: kind}), checked against
    the table's ``columns``; a ``ValueError`` says what is wrong."""
    if not declared:
        return ()
    out = []
    for column, kind in dict(declared).items():
        if column not in columns or kind not in KINDS:
            raise ValueError(
                f"{model.__name__}.stator_write_columns: {column!r}: {kind!r} must name a "
                f"column of the table and one of {', '.join(KINDS)}"
            )
        out.append((column, kind))
    return tuple(out)


def encoders(columns: WriteColumns, row_by_row: bool) -> Callable[[Any], tuple[Any, ...]]:
    """A function of one write's ``extra`` (a dict by column name) to its values in the
    order of ``columns``, for one batch (each distinct time and list encoded once).
    ``row_by_row``: SQLite's row-at-a-time write, whose times are ``to_sqlite_text``; else
    the text a batch's typed arrays read (UTC, ISO 8601)."""
    texts = _Texts(to_sqlite_text if row_by_row else _time)
    encode = {"time": texts.time, "json": texts.json, "value": _as_is}
    # Written out for the columns (once per batch, against a row's loop over them): one
    # call per column, no list, no tuple() of it.
    scope: dict[str, Any] = {f"step_{i}": encode[kind] for i, (_, kind) in enumerate(columns)}
    items = "".join(f"step_{i}(get({name!r})), " for i, (name, _) in enumerate(columns))
    exec(f"def values(extra):\n    get = extra.get\n    return ({items})\n", scope)
    values: Callable[[Any], tuple[Any, ...]] = scope["values"]
    return values


def batch_columns(
    columns: WriteColumns, writes: Sequence[Write], row_by_row: bool
) -> dict[str, list[Any]]:
    """The batch's values column by column, named as the batch statement reads them
    (``x0``, ``x1``… in the order of ``columns``)."""
    values = encoders(columns, row_by_row)
    rows = [values(w.extra) for w in writes]
    return {f"x{i}": [row[i] for row in rows] for i in range(len(columns))}


def _as_is(value: Any) -> Any:
    return value


class _Texts:
    """One batch's encodings: each distinct time formatted once (by ``format``), each list of
    strings (worker ids) or empty list dumped once; None stays None.  Anything else is dumped
    as it comes."""

    __slots__ = ("_format", "_lists", "_times")

    def __init__(self, format: Callable[[datetime], str]) -> None:
        self._format = format
        self._times: dict[datetime, str | None] = {}
        self._lists: dict[tuple[str, ...], str] = {}

    def time(self, value: datetime | None) -> str | None:
        if value is None:
            return None
        text = self._times.get(value)
        if text is None:
            text = self._times[value] = self._format(value)
        return text

    def json(self, value: Any) -> str | None:
        if value is None:
            return None
        if type(value) is list:
            if not value:
                return "[]"  # json.dumps([])
            for v in value:  # a loop, not ``all()`` over a generator: once per row
                if type(v) is not str:
                    return json.dumps(value)
            key = tuple(value)
            text = self._lists.get(key)
            if text is None:
                text = self._lists[key] = json.dumps(value)
            return text
        return json.dumps(value)


def _time(value: datetime) -> str:
    """In UTC, as a batch's ``timestamptz`` array reads it."""
    return value.astimezone(UTC).isoformat() if value.tzinfo else value.isoformat()
