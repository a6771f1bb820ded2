"""The SQL of ``stator.django`` tasks: the enqueue INSERT.  (A task's results are written
by the fenced write that moves it on: ``StatorTask.stator_write_columns``.)

Enqueueing is one prepared-shape INSERT through the caller's Django connection (and so in
the caller's transaction); the ORM's ``save()`` spends several times as long compiling the
same statement.
"""

from __future__ import annotations

import json
from typing import Any

from ._dialects import SqlDialect

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
