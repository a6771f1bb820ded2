"""Proxy models of a ``StatorModel`` and of ``StatorTask`` (a second admin over the same
table): they define without clashing fields, their admins work, and the worker runs their
table once, as the concrete model."""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

import pytest
from django.core.management import call_command
from djtest.orders.models import Order, OrderStates, PaidOrder
from djtest.taskproxy.models import TaskProxy

from stator.django._setup import build_stator, stator_models
from stator.django.models import StatorTask

HAS_TASKS = importlib.util.find_spec("django.tasks") is not None


def test_a_proxy_adds_no_fields_and_is_not_a_model_to_run() -> None:
    for proxy, concrete in ((PaidOrder, Order), (TaskProxy, StatorTask)):
        assert proxy._meta.proxy and proxy._meta.db_table == concrete._meta.db_table
        assert proxy._meta.local_fields == []  # the Stator fields are the concrete model's
        assert [f.name for f in proxy._meta.concrete_fields] == [
            f.name for f in concrete._meta.concrete_fields]
    assert PaidOrder not in stator_models() and TaskProxy not in stator_models()
    names = [t.name for t in build_stator().store.tracked]
    assert len(names) == len(set(names)) and "orders_order" in names


@pytest.mark.django_db(transaction=True)
def test_rows_made_through_a_proxy_are_run_as_the_concrete_models() -> None:
    paid = PaidOrder.objects.create(paid=True)
    moved = PaidOrder.objects.create()
    moved.transition_perform(OrderStates.charged)  # the proxy's instances move like any row
    django_log = logging.getLogger("django")
    level = django_log.level
    try:
        call_command("runstator", "orders", "--until-idle")
    finally:
        django_log.setLevel(level)
    assert dict(Order.objects.values_list("pk", "state")) == {
        paid.pk: "charged", moved.pk: "charged"}


@pytest.mark.django_db(transaction=True)
def test_a_proxys_admin_lists_and_draws_its_rows(admin_client: Any) -> None:
    order = PaidOrder.objects.create(paid=True)
    assert admin_client.get("/admin/orders/paidorder/").status_code == 200
    page = admin_client.get(f"/admin/orders/paidorder/{order.pk}/change/")
    assert page.status_code == 200 and "Currently in <b>new</b>." in page.content.decode()
    assert admin_client.get("/admin/orders/order/").status_code == 200  # the first admin too


@pytest.mark.skipif(not HAS_TASKS, reason="the task backend needs Django >= 6.0")
@pytest.mark.django_db(transaction=True)
def test_a_task_proxys_admin_lists_the_tasks(admin_client: Any) -> None:
    import tasks_jobs
    from django.test import override_settings

    with override_settings(TASKS={"default": {"BACKEND": "stator.django.tasks.StatorBackend"}}):
        result = tasks_jobs.add.enqueue(2, 3)
        listing = admin_client.get("/admin/taskproxy/taskproxy/")
        assert listing.status_code == 200 and "tasks_jobs.add" in listing.content.decode()
        detail = admin_client.get(f"/admin/taskproxy/taskproxy/{result.id}/change/")
        assert detail.status_code == 200
