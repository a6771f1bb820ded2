"""A claim's instances are the ones ``Model.from_db`` makes (``_store/_django_rows.py`` builds
them with less Python): the same values, state and type as a queryset's, on SQLite and
PostgreSQL; and a model with a ``pre_init``/``post_init`` receiver still gets its signals."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db.models.signals import post_init, pre_init
from djtest.orders.models import Order

from stator._store._django import DjangoStore

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "pg"]),
    pytest.mark.parametrize("alias", ["default", "pg"]),
]


def _claim(alias: str, count: int) -> list[Any]:
    store = DjangoStore(alias, [Order])
    tracked = store.tracked[0]
    return store.claim(tracked, datetime.now(UTC) + timedelta(seconds=5), count)


def _fields(obj: Any) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in Order._meta.concrete_fields}


def test_a_claimed_instance_is_the_one_a_queryset_loads(alias: str) -> None:
    made = Order.objects.using(alias).create(note="as inserted", paid=True)
    [(obj, claimed)] = _claim(alias, 5)
    loaded = Order.objects.using(alias).get(pk=made.pk)
    assert type(obj) is Order
    assert obj.pk == made.pk
    # The claim moved the lease (state_next) on: everything else as the queryset reads it.
    assert {**_fields(obj), "state_next": None} == {**_fields(loaded), "state_next": None}
    assert obj.state_next == claimed.lease_until
    assert (obj._state.adding, obj._state.db) == (False, alias)
    assert claimed.state_changed == loaded.state_changed
    assert claimed.state_changed.tzinfo is not None


@pytest.fixture
def init_signals() -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def before(sender: Any, **kwargs: Any) -> None:
        seen.append(("pre_init", sender))

    def after(sender: Any, instance: Any, **kwargs: Any) -> None:
        seen.append(("post_init", instance.pk))

    pre_init.connect(before, sender=Order)
    post_init.connect(after, sender=Order)
    try:
        yield seen
    finally:
        pre_init.disconnect(before, sender=Order)
        post_init.disconnect(after, sender=Order)


def test_a_models_init_signals_are_sent_for_each_claimed_row(
    alias: str, init_signals: list[tuple[str, Any]]
) -> None:
    first = Order.objects.using(alias).create(note="one")
    second = Order.objects.using(alias).create(note="two")
    init_signals.clear()  # the creates' own
    claimed = _claim(alias, 5)
    assert sorted(obj.pk for obj, _c in claimed) == sorted([first.pk, second.pk])
    assert sorted(e for e in init_signals if e[0] == "post_init") == sorted(
        [("post_init", first.pk), ("post_init", second.pk)]
    )
    assert [e for e in init_signals if e[0] == "pre_init"] == [("pre_init", Order)] * 2


@pytest.mark.parametrize("zone", [None, "Europe/Paris"])
def test_the_quick_converters_give_what_djangos_give(alias: str, zone: str | None) -> None:
    """The SQLite time converter (whose UTC results are shared between rows) and the JSON one
    (whose no-arguments value is made anew each time) against Django's own, in UTC and in a
    connection time zone of its own."""
    from types import SimpleNamespace
    from zoneinfo import ZoneInfo

    from django.db import connections
    from django.db.models import JSONField

    from stator._store._django_rows import _json_value, _sqlite_time

    conn = SimpleNamespace(timezone=UTC if zone is None else ZoneInfo(zone),
                           ops=connections[alias].ops)
    naive = datetime(2026, 3, 29, 1, 30, 0, 250)
    for _ in range(2):  # the second time from what the first made
        made = _sqlite_time(naive, None, conn)
        assert made == naive.replace(tzinfo=conn.timezone)
        assert made.tzinfo is conn.timezone
    field = JSONField()
    for text in ('{"args": [], "kwargs": {}}', "[]", '{"args": [1], "kwargs": {"a": null}}'):
        first = _json_value(text, None, conn)
        assert first == field.from_db_value(text, None, connections[alias])
        first.append(1) if isinstance(first, list) else first["args"].append(1)
        assert _json_value(text, None, conn) == field.from_db_value(text, None, connections[alias])
