"""The admin's Stator actions (issue 20, item 5): they need the change permission, they are
the dashboard's own fenced row operations (a row moved since the confirmation page showed it
is left alone), and each row they change is written in Django's admin log and in Stator's
action log.  On SQLite ("default") and PostgreSQL ("pg": the orders app routed there)."""

from __future__ import annotations

import html
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.db import connections
from django.test import Client, override_settings
from djtest.orders.models import Job, Order, OrderStates

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "pg"])


class OrdersTo:
    """Routes the orders app to one database (the admin's own tables stay in default)."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def db_for_read(self, model: Any, **_hints: Any) -> str | None:
        return self.alias if model._meta.app_label == "orders" else None

    db_for_write = db_for_read


@pytest.fixture(params=["default", "pg"])
def alias(request: pytest.FixtureRequest) -> Iterator[str]:
    chosen: str = request.param
    with connections[chosen].cursor() as cursor:  # not a Django model: never flushed
        cursor.execute("DELETE FROM stator_actions")
    with override_settings(DATABASE_ROUTERS=[OrdersTo(chosen)]):
        assert Order.objects.db == chosen
        yield chosen


def staff(*codenames: str) -> Client:
    user = User.objects.create_user("clerk", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def actions_logged(alias: str) -> list[tuple[str, str, str | None]]:
    """Stator's action log as another connection sees it: only what was committed."""
    found: list[tuple[str, str, str | None]] = []

    def read() -> None:
        try:
            with connections[alias].cursor() as cursor:
                cursor.execute("SELECT actor, action, row_pk FROM stator_actions ORDER BY id")
                found.extend(tuple(r) for r in cursor.fetchall())
        finally:
            connections[alias].close()

    reader = threading.Thread(target=read)
    reader.start()
    reader.join()
    return found


def confirm(client: Client, url: str, action: str, pks: list[Any]) -> dict[str, Any]:
    """The confirmation page's form, as a browser would post it back."""
    page = client.post(url, {"action": action, "_selected_action": pks})
    assert page.status_code == 200, page.status_code
    text = page.content.decode()
    assert "Yes, move them" in text
    seen = [html.unescape(v) for v in re.findall(r'name="stator_seen" value="([^"]*)"', text)]
    chosen = re.findall(r'name="_selected_action" value="([^"]*)"', text)
    return {"action": action, "_selected_action": chosen, "stator_seen": seen, "post": "yes"}


def test_a_view_only_staff_user_gets_no_stator_action(alias: str) -> None:
    client = staff("view_order", "view_job")
    order = Order.objects.create()
    job = Job.objects.create(kind="later")
    later = datetime.now(UTC) + timedelta(hours=1)
    Job.objects.filter(pk=job.pk).update(state_next=later)
    listing = client.get("/admin/orders/order/")
    assert listing.status_code == 200
    assert "stator_move_to" not in listing.content.decode()
    assert "stator_retry_now" not in client.get("/admin/orders/job/").content.decode()
    seen = f'["{order.pk}", "new", null]'
    assert client.post("/admin/orders/order/", {
        "action": "stator_move_to_charged", "_selected_action": [order.pk],
        "stator_seen": [seen], "post": "yes",
    }).status_code == 403
    assert client.post("/admin/orders/job/", {
        "action": "stator_retry_now", "_selected_action": [job.pk], "index": 0,
    }).status_code == 403
    assert Order.objects.get(pk=order.pk).state == "new"
    assert Job.objects.get(pk=job.pk).state_next == later
    assert not LogEntry.objects.exists()
    assert actions_logged(alias) == []


def test_a_user_with_change_permission_moves_rows_and_both_logs_say_so(alias: str) -> None:
    client = staff("view_order", "change_order")
    order = Order.objects.create()
    shipped = Order.objects.create()
    shipped.transition_perform(OrderStates.charged)
    shipped.transition_perform(OrderStates.shipped)
    form = confirm(client, "/admin/orders/order/", "stator_move_to_charged",
                   [order.pk, shipped.pk])
    assert form["_selected_action"] == [str(order.pk)]  # only rows with an edge are shown
    done = client.post("/admin/orders/order/", form, follow=True).content.decode()
    assert "1 row(s) moved to charged" in done
    moved = Order.objects.get(pk=order.pk)
    assert moved.state == "charged" and [s for s, _ in moved.state_history] == ["charged"]
    assert Order.objects.get(pk=shipped.pk).state == "shipped"
    [entry] = LogEntry.objects.all()
    assert entry.action_flag == CHANGE and entry.object_id == str(order.pk)
    assert entry.user.username == "clerk" and "new to charged" in entry.get_change_message()
    assert actions_logged(alias) == [("admin:clerk", "move", str(order.pk))]


def test_a_stale_admin_move_is_refused_by_the_fence(alias: str) -> None:
    client = staff("view_order", "change_order", "view_job", "change_job")
    order = Order.objects.create()
    form = confirm(client, "/admin/orders/order/", "stator_move_to_charged", [order.pk])
    order.transition_perform(OrderStates.charged)  # meanwhile, someone moves it
    done = client.post("/admin/orders/order/", form, follow=True).content.decode()
    assert "0 row(s) moved" in done and "1 row(s) changed since they were shown" in done
    assert [s for s, _ in Order.objects.get(pk=order.pk).state_history] == ["charged"]
    job = Job.objects.create()
    form = confirm(client, "/admin/orders/job/", "stator_move_to_done", [job.pk])
    Job.objects.filter(pk=job.pk).update(state_next=datetime.now(UTC) + timedelta(hours=1))
    client.post("/admin/orders/job/", form)  # same state, but it was rescheduled meanwhile
    assert Job.objects.get(pk=job.pk).state == "waiting"
    assert not LogEntry.objects.exists()
    assert actions_logged(alias) == []


def test_retry_now_needs_change_permission_and_is_logged(alias: str) -> None:
    client = staff("view_job", "change_job")
    waiting = Job.objects.create(kind="later")
    Job.objects.filter(pk=waiting.pk).update(state_next=datetime.now(UTC) + timedelta(hours=1))
    done = client.post("/admin/orders/job/", {
        "action": "stator_retry_now", "_selected_action": [waiting.pk], "index": 0,
    }, follow=True).content.decode()
    assert "1 row(s) due now" in done
    assert Job.objects.get(pk=waiting.pk).state_next <= datetime.now(UTC)
    [entry] = LogEntry.objects.all()
    assert entry.object_id == str(waiting.pk) and "retry now" in entry.get_change_message()
    assert actions_logged(alias) == [("admin:clerk", "retry", str(waiting.pk))]


# A time Python cannot hold, written by raw SQL, a migration or another tool (issue 20, item
# 7): PostgreSQL's infinity or a year past 9999; on SQLite, a day or an hour that does not
# exist (Django reads text that is no time at all as None already).
UNREADABLE_TIMES = {"default": ["2026-02-30 10:00:00", "2026-11-26 24:00:00"],
                    "pg": ["infinity", "20000-01-01 00:00:00+00"]}


@pytest.mark.parametrize("case", [0, 1])
def test_a_row_holding_a_time_python_cannot_hold_is_listed_shown_and_offered(
    alias: str, case: int
) -> None:
    client = staff("view_order", "change_order")
    order, other = Order.objects.create(), Order.objects.create()
    with connections[alias].cursor() as cursor:
        cursor.execute(f"UPDATE {Order._meta.db_table} SET state_changed = %s WHERE id = %s",
                       [UNREADABLE_TIMES[alias][case], order.pk])
    listing = client.get("/admin/orders/order/")
    assert listing.status_code == 200
    assert f"/admin/orders/order/{other.pk}/change/" in listing.content.decode()
    assert client.get(f"/admin/orders/order/{order.pk}/change/").status_code == 200
    page = client.post("/admin/orders/order/", {
        "action": "stator_move_to_charged", "_selected_action": [order.pk, other.pk]})
    assert page.status_code == 200 and "Yes, move them" in page.content.decode()


@pytest.mark.parametrize("seen", [
    "[" * 5000,  # nested past Python's recursion limit
    '["{pk}", "new", "9999-12-31T23:59:59-05:00"]',  # beyond the calendar in UTC
    '["{pk}", "new", "2026-01-01T00:00:00"]',  # a time without its zone
])
def test_a_forged_confirmation_leaves_the_row_alone(alias: str, seen: str) -> None:
    client = staff("view_order", "change_order")
    order = Order.objects.create()
    done = client.post("/admin/orders/order/", {
        "action": "stator_move_to_charged", "_selected_action": [order.pk],
        "stator_seen": [seen.replace("{pk}", str(order.pk))], "post": "yes",
    }, follow=True)
    assert done.status_code == 200
    assert Order.objects.get(pk=order.pk).state == "new"
    assert actions_logged(alias) == []
