"""StatorAdmin's forms leave the engine's fields alone: an order can be added and saved with
``state_history = JSONField(null=True)`` (no ``blank``), and nothing the engine owns (state,
times, attempts, history, the claim's lease and stamps) is an input a hand could change."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from djtest.orders.models import Order, OrderStates
from test_admin_graph import admin_site  # noqa: F401  (the live server fixture)

from stator.django._task_model import StatorTask
from stator.django.admin import StatorAdmin

CHROMIUM = os.environ.get("STATOR_CHROMIUM", "/usr/bin/chromium")
SHOTS = Path(os.environ.get("STATOR_SHOTS", "/tmp"))
WAIT = 60.0  # seconds: generous, the machine may be busy
OWNED = ("state", "state_changed", "state_next", "state_attempts", "state_history")


def test_every_engine_owned_field_is_read_only() -> None:
    from django.contrib import admin

    class OrderAdmin(StatorAdmin, admin.ModelAdmin):  # type: ignore[type-arg]
        readonly_fields = ("paid",)

    shown = OrderAdmin(Order, admin.site).get_readonly_fields(None)  # type: ignore[arg-type]
    assert shown[0] == "paid" and set(OWNED) <= set(shown) and "note" not in shown

    class TaskAdmin(StatorAdmin, admin.ModelAdmin):  # type: ignore[type-arg]
        pass

    # The claim's columns too (the task model's lease copy and its claim stamps).
    task_fields = TaskAdmin(StatorTask, admin.site).get_readonly_fields(None)  # type: ignore[arg-type]
    assert {"leased_until", "started_at", "last_attempted_at"} <= set(task_fields)


@pytest.mark.django_db(transaction=True)
def test_an_order_is_added_and_saved_without_touching_its_history(admin_client: Any) -> None:
    add = admin_client.get("/admin/orders/order/add/").content.decode()
    assert 'name="paid"' in add
    assert not [f for f in OWNED if f'name="{f}"' in add]  # not offered for editing
    assert "DatabaseDefault" not in add and "field-state_changed" not in add  # nor shown
    done = admin_client.post("/admin/orders/order/add/",
                             {"paid": "on", "note": "", "state_history": '["forged"]'})
    assert done.status_code == 302, done.content.decode()[:2000]
    order = Order.objects.get()
    assert order.state == "new" and order.paid and order.state_history is None
    order.transition_perform(OrderStates.charged)
    history = Order.objects.get().state_history
    saved = admin_client.post(f"/admin/orders/order/{order.pk}/change/",
                              {"paid": "on", "note": "by hand", "state": "shipped",
                               "state_history": "[]", "state_attempts": "9"})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    order = Order.objects.get()
    assert (order.note, order.state, order.state_attempts) == ("by hand", "charged", 0)
    assert order.state_history == history and [s for s, _ in history] == ["charged"]


def test_an_order_is_added_and_saved_in_chromium(
    admin_site: str, admin_user: Any,  # noqa: F811
) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set "
                    "STATOR_CHROMIUM)")
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.set_default_timeout(WAIT * 1000)
            page.goto(f"{admin_site}/admin/login/?next=/admin/orders/order/add/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", "password")
            page.click("input[type=submit]")
            page.wait_for_selector("#order_form")
            assert page.locator("textarea, #id_state, #id_state_history").count() == 0
            page.screenshot(path=str(SHOTS / "admin-order-add.png"), full_page=True)
            page.check("#id_paid")
            page.click("input[name=_continue]")  # "Save and continue editing"
            page.wait_for_selector(".messagelist .success")
            assert page.locator(".errornote, .errorlist").count() == 0
            assert "was added successfully" in page.locator(".messagelist").inner_text()
            assert page.locator(".field-state_history .readonly").count() == 1  # shown
            page.fill("#id_note", "gift wrap")
            page.click("input[name=_continue]")
            page.wait_for_selector(".messagelist .success")
            assert page.locator(".errornote, .errorlist").count() == 0
            assert "was changed successfully" in page.locator(".messagelist").inner_text()
            page.screenshot(path=str(SHOTS / "admin-order-saved.png"), full_page=True)
        finally:
            browser.close()
    order = Order.objects.get()
    assert (order.state, order.paid, order.note) == ("new", True, "gift wrap")
