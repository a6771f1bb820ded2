"""Quicker equivalents of what Django runs for each row a claim turns into an instance.

A claim of the Django driver builds one model instance per row, as a queryset would: each
column through its field's converters, then ``Model.from_db``.  For a batch of no-op tasks
that was a third of the worker's time, spent mostly on generalities: Django's SQLite
converter re-reads ``settings.USE_TZ`` and checks awareness twice for every time, and
``Model.__init__`` sends ``pre_init``/``post_init`` and walks the fields for every row.

Here, and only where the result is the same:

- ``quick_converter``: Django's SQLite time converter and ``JSONField``'s (no custom decoder)
  replaced by functions doing the same steps directly; any other converter is kept;
- ``row_converter``: a row's converters in one function, the quick ones' usual cases inline;
- ``instance_maker``: ``from_db``'s instance, its fields set straight into the instance's
  ``__dict__`` as ``Model.__init__`` would set them, when the model keeps Django's
  ``from_db``, ``__init__`` and ``__setattr__``, its fields' attributes are Django's plain
  ones, and neither ``pre_init`` nor ``post_init`` has a receiver for the model (the same
  test ``Signal.send`` starts with); otherwise ``from_db`` itself.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db.models import JSONField, Model
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init
from django.dispatch.dispatcher import NO_RECEIVERS

Converter = Callable[[Any, Any, Any], Any]

_PLAIN_ATTRIBUTES = (DeferredAttribute, ForeignKeyDeferredAttribute)


def quick_converter(convert: Converter, field: Any) -> Converter:
    """``convert`` (a converter Django gave for ``field``), or a quicker one doing the same."""
    func = getattr(convert, "__func__", None)
    # Looked up, not imported: Django loads its SQLite backend only for a SQLite database.
    sqlite = sys.modules.get("django.db.backends.sqlite3.operations")
    if sqlite is not None and func is sqlite.DatabaseOperations.convert_datetimefield_value:
        return _sqlite_time
    if func is JSONField.from_db_value and type(field) is JSONField and field.decoder is None:
        return _json_value
    return convert


def _sqlite_time(value: Any, expression: Any, connection: Any) -> Any:
    """``convert_datetimefield_value`` of Django's SQLite backend, step for step: the text
    parsed (SQLite's own converter already did, for a declared ``datetime`` column), a naive
    time made aware in the connection's time zone when ``USE_TZ``."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        return connection.ops.convert_datetimefield_value(value, expression, connection)
    if value.utcoffset() is None and _use_tz():
        zone = connection.timezone
        if zone is not UTC:
            return value.replace(tzinfo=zone)
        # A claim's rows share most of their times (the claim's stamps, its lease), and
        # ``replace`` was most of this function's cost: each distinct one made aware once.
        # (Only in UTC, where ``fold`` means nothing; datetimes are immutable, so sharing
        # one between rows is safe.)
        aware = _IN_UTC.get(value)
        if aware is None:
            if len(_IN_UTC) >= _IN_UTC_SIZE:
                _IN_UTC.clear()
            aware = _IN_UTC[value] = value.replace(tzinfo=UTC)
        return aware
    return value


_IN_UTC: dict[datetime, datetime] = {}  # naive time -> the same in UTC (``_sqlite_time``)
_IN_UTC_SIZE = 4096


_USE_TZ: list[bool] = []  # settings.USE_TZ, read once, again after a change (tests)


def _use_tz() -> bool:
    if not _USE_TZ:
        _USE_TZ.append(bool(settings.USE_TZ))
    return _USE_TZ[0]


def _forget_use_tz(*, setting: str, **kwargs: Any) -> None:
    if setting == "USE_TZ":
        _USE_TZ.clear()


setting_changed.connect(_forget_use_tz)


_NO_ARGUMENTS = json.dumps({"args": [], "kwargs": {}})


def _json_value(value: Any, expression: Any, connection: Any) -> Any:
    """``JSONField.from_db_value`` without a decoder (an empty list needs no parser)."""
    if value is None:
        return None
    if value == "[]":
        return []
    if value == _NO_ARGUMENTS:  # a task enqueued without arguments: its ``args_kwargs``
        return {"args": [], "kwargs": {}}
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def row_converter(
    converters: Sequence[tuple[int, Converter]],
) -> Callable[[list[Any], Any], None]:
    """One function converting a claimed row's values in place (``values``, the
    connection), as calling ``converters`` ((column, converter), in order) one by one would:
    the quick time and JSON converters' usual cases inlined, not a call per column and row
    (a claimed task has twelve such columns)."""
    columns = [i for i, _ in converters]
    if len(set(columns)) != len(columns):  # a column with several: one by one, in order

        def each(values: list[Any], conn: Any) -> None:
            for i, convert in converters:
                values[i] = convert(values[i], None, conn)

        return each
    quick = (_sqlite_time, _json_value)
    others = tuple((i, c) for i, c in converters if c not in quick)
    times = tuple(i for i, c in converters if c is _sqlite_time)
    jsons = tuple(i for i, c in converters if c is _json_value)
    in_utc = _IN_UTC

    def convert(values: list[Any], conn: Any) -> None:
        for i, other in others:
            values[i] = other(values[i], None, conn)
        # A naive time read on a connection in UTC, with USE_TZ: the one ``_sqlite_time``
        # has made aware before (``_IN_UTC``); any other value through ``_sqlite_time``.
        utc = bool(times) and conn.timezone is UTC and _use_tz()
        for i in times:
            value = values[i]
            if value is None:
                continue
            if utc and type(value) is datetime and value.tzinfo is None:
                aware = in_utc.get(value)
                values[i] = _sqlite_time(value, None, conn) if aware is None else aware
            else:
                values[i] = _sqlite_time(value, None, conn)
        for i in jsons:
            value = values[i]
            if value == "[]":
                values[i] = []
            elif value is not None:
                values[i] = _json_value(value, None, conn)

    return convert


def instance_maker(model: Any, alias: str, attnames: Sequence[str]) -> Callable[[list[Any]], Any]:
    """A function from a claimed row's converted values (every concrete field, in order) to
    the instance ``model.from_db(alias, attnames, values)`` would return."""
    names = list(attnames)

    def from_db(values: list[Any]) -> Any:
        return model.from_db(alias, names, values)

    plain = (
        getattr(model.from_db, "__func__", None) is Model.from_db.__func__
        and model.__init__ is Model.__init__
        and model.__setattr__ is object.__setattr__
        and model.__new__ is object.__new__
        and len(names) == len(model._meta.concrete_fields)
        and all(type(getattr(model, name, None)) in _PLAIN_ATTRIBUTES for name in names)
    )
    if not plain:
        return from_db
    new = object.__new__

    def make(values: list[Any]) -> Any:
        if not (_quiet(pre_init, model) and _quiet(post_init, model)):
            return from_db(values)  # sends them (and fills their caches: see ``_quiet``)
        obj = new(model)
        state = ModelState()
        state.adding = False
        state.db = alias
        fields = obj.__dict__
        fields["_state"] = state
        fields.update(zip(names, values, strict=True))
        return obj

    return make


def _quiet(signal: Any, sender: Any) -> bool:
    """Whether ``signal.send(sender=...)`` would return at once, calling nobody: the test
    ``Signal.send`` itself starts with (the cache is filled by the first send for a sender,
    and emptied whenever a receiver connects or disconnects)."""
    return not signal.receivers or signal.sender_receivers_cache.get(sender) is NO_RECEIVERS
