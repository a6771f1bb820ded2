"""The SQL of ``stator.django`` tasks: the enqueue INSERT, and the bulk write of results in
the transaction of their fenced transitions.

Enqueueing is one prepared-shape INSERT through the caller's Django connection (and so in
the caller's transaction); the ORM's ``save()`` spends several times as long compiling the
same statement.  A task's attempt ends with values for a few columns of its row (start and
finish times, return value, errors, worker ids).  Written one task at a time they would cost
a transaction per task; here a whole batch of them is one UPDATE from one JSON parameter,
run by the store right after the batch's fenced write, for the rows whose fence held.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, text

from .._policy import Write
from .._time_text import to_sqlite_text
from ._dialects import SqlDialect

TIME_COLUMNS = ("started_at", "last_attempted_at", "finished_at")
JSON_COLUMNS = ("return_value", "errors", "worker_ids")
INSERT_COLUMNS = (
    "id", "task_path", "queue_name", "priority", "backend", "args_kwargs", "run_after",
    "max_attempts", "enqueued_at", "errors", "worker_ids",
)
INSERT_JSON = ("args_kwargs", "errors", "worker_ids")
INSERT_TIMES = ("run_after", "enqueued_at", "state_next")
MAX_ARGUMENTS_BYTES = 1024 * 1024  # the default of OPTIONS["max_arguments_bytes"]


def check_arguments(args: Any, kwargs: Any, max_bytes: int | None) -> None:
    """Refuse, with ``ValueError``, task arguments the database would refuse or should not
    hold, before anything is sent to it.

    PostgreSQL refuses NUL characters, lone surrogates and NaN/infinity in ``jsonb``, and its
    refusal aborts the caller's whole transaction; SQLite would store them.  Checking here
    keeps the caller's transaction usable and both databases alike.  ``max_bytes`` (None: no
    limit) bounds the arguments' JSON, in UTF-8: a task row is read whole by every worker
    that runs it and every page that shows it."""
    _check_storable(args, "args")
    _check_storable(kwargs, "kwargs")
    if max_bytes is None:
        return
    size = len(json.dumps({"args": args, "kwargs": kwargs}, ensure_ascii=False).encode())
    if size > max_bytes:
        raise ValueError(
            f"task arguments are {size} bytes as JSON, over the backend's limit of "
            f"{max_bytes} (OPTIONS['max_arguments_bytes']); pass a reference (a primary key, "
            "a file name) instead"
        )


def _check_storable(value: Any, where: str) -> None:
    if isinstance(value, str):
        _check_text(value, where)
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"task {where} is {value!r}, which JSON cannot hold")
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                _check_text(key, f"{where} (a key)")
            _check_storable(item, f"{where}[{key!r}]")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_storable(item, f"{where}[{i}]")


def _check_text(text: str, where: str) -> None:
    if "\x00" in text:
        raise ValueError(f"task {where} holds a NUL character (\\x00), which PostgreSQL "
                         "cannot store in JSON")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"task {where} holds a lone surrogate, which is not valid "
                         "Unicode") from None


def insert_sql(table: str, dialect: SqlDialect, due: bool) -> str:
    """The INSERT of one task; with ``due`` it also sets ``state_next`` (a deferred task),
    otherwise the column's database default makes the task due at once."""
    columns = [*INSERT_COLUMNS, "state_next"] if due else list(INSERT_COLUMNS)
    values = [dialect.django_json("%s") if c in INSERT_JSON else "%s" for c in columns]
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(values)})"


def insert_params(values: dict[str, Any], dialect: SqlDialect) -> list[Any]:
    columns = [*INSERT_COLUMNS, "state_next"] if "state_next" in values else INSERT_COLUMNS
    params: list[Any] = []
    for name in columns:
        value = values.get(name)
        if name in INSERT_JSON:
            value = json.dumps(value)
        elif name in INSERT_TIMES and value is not None:
            text = dialect.django_time(value)
            value = value if text is None else text
        params.append(value)
    return params


def result_update_sql(table: str, pk: str, pk_type: str, dialect: SqlDialect) -> str:
    if dialect.row_by_row_writes:  # one row at a time (see ``write_results``)
        placeholders = ", ".join(f"{c} = ?" for c in (*TIME_COLUMNS, *JSON_COLUMNS))
        return f"UPDATE {table} SET {placeholders} WHERE {pk} = ?"
    columns = [("pk", pk_type)] + [(c, "timestamptz") for c in TIME_COLUMNS]
    columns += [(c, "text") for c in JSON_COLUMNS]
    source = dialect.payload_source(columns)
    sets = [f"{c} = v.{c}" for c in TIME_COLUMNS]
    sets += [f"{c} = {dialect.django_json(f'v.{c}')}" for c in JSON_COLUMNS]
    return f"UPDATE {table} SET {', '.join(sets)} FROM {source} WHERE {table}.{pk} = v.pk"


def write_results(
    conn: Connection, sql: str, dialect: SqlDialect, writes: Sequence[Write]
) -> None:
    """PostgreSQL: one UPDATE from a JSON document of the batch.  SQLite runs in this
    process, so the same UPDATE once per row (``executemany``) costs no round trip and
    spares the JSON, in Python and in SQLite alike (as the fenced write does).

    Each distinct value is encoded once per batch (``_Texts``): a batch's tasks share their
    start (the claim's stamp), their worker ids and their empty error lists."""
    texts = _Texts(to_sqlite_text if dialect.row_by_row_writes else _time)
    if dialect.row_by_row_writes:
        conn.exec_driver_sql(sql, [_row_params(w.pk, w.extra, texts) for w in writes])
        return
    rows = [_row(w.pk, w.extra, texts) for w in writes]
    conn.execute(text(sql), {"payload": json.dumps(rows)})


def _row_params(pk: Any, values: dict[str, Any], texts: _Texts) -> tuple[Any, ...]:
    """A row's values as SQLite's text (``to_sqlite_text``), for the row-by-row UPDATE (in
    the order of ``TIME_COLUMNS``, ``JSON_COLUMNS``, then the key)."""
    time, json_text, get = texts.time, texts.json, values.get
    return (
        time(get("started_at")), time(get("last_attempted_at")), time(get("finished_at")),
        json_text(get("return_value")), json_text(get("errors")), json_text(get("worker_ids")),
        pk,
    )


def _row(pk: Any, values: dict[str, Any], texts: _Texts) -> dict[str, Any]:
    row: dict[str, Any] = {"pk": pk}
    for name in TIME_COLUMNS:
        row[name] = texts.time(values.get(name))
    for name in JSON_COLUMNS:
        row[name] = texts.json(values.get(name))
    return row


class _Texts:
    """One batch's encodings: each distinct time formatted once (by ``format``), each list of
    strings (worker ids) or empty list dumped once; None stays None (SQL NULL, as Django's
    ``JSONField(null=True)`` stores it).  Anything else is dumped as it comes."""

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
            if all(type(v) is str for v in value):
                key = tuple(value)
                text = self._lists.get(key)
                if text is None:
                    text = self._lists[key] = json.dumps(value)
                return text
        return json.dumps(value)


def _time(value: datetime) -> str:
    """In UTC, as the payload's ``timestamptz`` column reads it back."""
    return value.astimezone(UTC).isoformat() if value.tzinfo else value.isoformat()
