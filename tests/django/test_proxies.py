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


def test_the_tasks_model_is_run_and_shown_only_with_a_task_backend() -> None:
    """No ``TASKS`` entry using Stator's backend: no ``stator_tasks`` in the status, the
    dashboard or the workers (its wake-up triggers are installed all the same)."""
    from django.test import override_settings

    assert StatorTask not in stator_models()
    assert "stator_tasks" not in [t.name for t in build_stator().store.tracked]
    assert StatorTask in stator_models(every=True)
    backend = {"default": {"BACKEND": "stator.django.tasks.StatorBackend"}}
    with override_settings(TASKS=backend):
        assert StatorTask in stator_models()


@pytest.mark.django_db(transaction=True)
def test_tasks_left_running_by_an_earlier_version_go_back_to_ready() -> None:
    """The task graph has no ``running`` state (docs/tasks.md): migration 0008 moves such
    rows to ``ready``, keeping the lease they were held under (``state_next``)."""
    from datetime import UTC, datetime, timedelta
    from importlib import import_module
    from types import SimpleNamespace

    from django.apps import apps
    from django.db import connection

    from stator.django._task_model import TaskStates

    assert "running" not in TaskStates.states
    held = datetime.now(UTC) + timedelta(minutes=5)
    for pk, state in (("a", "running"), ("b", "successful")):
        StatorTask.objects.create(id=pk, task_path="x.y", queue_name="default", backend="default",
                                  args_kwargs={}, enqueued_at=datetime.now(UTC))
        StatorTask.objects.filter(pk=pk).update(state=state, state_next=held)
    migration = import_module("stator.django.migrations.0008_tasks_running_to_ready")
    migration.running_to_ready(apps, SimpleNamespace(connection=connection))
    rows = {t.pk: (t.state, t.state_next) for t in StatorTask.objects.all()}
    assert rows == {"a": ("ready", held), "b": ("successful", held)}
