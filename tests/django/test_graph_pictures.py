"""The orders and task graphs as users see them, in a real headless Chromium: the dashboard's
graph page and the admin's change page.  The geometry is measured in the browser (after its
fonts and styles) as well as from the markup: no edge runs through a box other than its ends,
no label lies on a box or on another label.  Screenshots go to ``STATOR_GRAPH_SHOTS`` (a
folder) or the test's temporary folder, to be looked at."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import django.contrib.admin
import pytest
from djtest.orders.models import Order
from graph_zoo import OrderStates, TaskStates
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from stator import StateGraph, Stator
from stator.django.admin import state_graph_html
from stator.sqlalchemy import StatorMixin

CHROMIUM = os.environ.get("STATOR_CHROMIUM", "/usr/bin/chromium")
WAIT = 60.0  # seconds: generous, the machine may be busy

# Run in the page: every drawn graph's boxes, labels and edge paths in screen pixels, and
# what overlaps.  Paths are sampled along their length; a point counts as inside a box only
# well within it (the arrow's tip touches its own box's border by design).
MEASURE = """() => {
  const out = [];
  for (const svg of document.querySelectorAll('svg.graph')) {
    const rect = e => e.getBoundingClientRect();
    const nodes = [...svg.querySelectorAll('.node')].map(n => ({
      name: n.querySelector('.name').textContent, box: rect(n.querySelector('rect'))}));
    const labels = [...svg.querySelectorAll('.edge text')]
      .filter(t => t.textContent.trim()).map(t => ({text: t.textContent, box: rect(t)}));
    const inside = (p, b, m) => p.x > b.left + m && p.x < b.right - m
                              && p.y > b.top + m && p.y < b.bottom - m;
    const overlap = (a, b) => a.left < b.right && b.left < a.right
                              && a.top < b.bottom && b.top < a.bottom;
    const problems = [];
    for (const e of svg.querySelectorAll('.edge')) {
      const from = e.dataset.from, to = e.dataset.to;
      const path = e.querySelector('path');
      const m = path.getScreenCTM(), n = path.getTotalLength();
      for (let i = 0; i <= 100; i++) {
        const q = path.getPointAtLength(n * i / 100);
        const p = new DOMPoint(q.x, q.y).matrixTransform(m);
        for (const node of nodes) {
          if (node.name !== from && node.name !== to && inside(p, node.box, 2)) {
            problems.push(`${from}->${to} crosses ${node.name}`);
          }
        }
      }
    }
    labels.forEach((l, i) => {
      for (const node of nodes) {
        if (overlap(l.box, node.box)) problems.push(`'${l.text}' on ${node.name}`);
      }
      labels.slice(i + 1).forEach(o => {
        if (overlap(l.box, o.box)) problems.push(`'${l.text}' on '${o.text}'`);
      });
      const s = rect(svg);
      if (l.box.left < s.left || l.box.right > s.right || l.box.top < s.top
          || l.box.bottom > s.bottom) problems.push(`'${l.text}' outside the drawing`);
    });
    out.push({labels: labels.map(l => l.text), problems: [...new Set(problems)]});
  }
  return out;
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shots_dir(tmp_path: Path) -> Path:
    where = Path(os.environ.get("STATOR_GRAPH_SHOTS") or tmp_path / "shots")
    where.mkdir(parents=True, exist_ok=True)
    return where


@contextmanager
def chromium() -> Iterator[Any]:
    """Started by the test after its database work (Django refuses database calls inside
    Playwright's event loop)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set "
                    "STATOR_CHROMIUM)")
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[str]:
    """The dashboard over an SQLite file with the orders and the tasks graphs, served by
    uvicorn in a thread."""
    uvicorn = pytest.importorskip("uvicorn")
    from stator.dashboard import create_app

    class Base(DeclarativeBase):
        pass

    def model(name: str, graph: type[StateGraph]) -> type:
        return type(name, (StatorMixin, Base), {
            "__tablename__": name.lower(), "state_graph": graph,
            "__annotations__": {"id": Mapped[int]}, "id": mapped_column(primary_key=True)})

    stator = Stator(f"sqlite:///{tmp_path / 'graphs.db'}",
                    [model("Orders", OrderStates), model("Tasks", TaskStates)])
    stator.migrate()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(stator), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(WAIT)
        stator.dispose()


@pytest.fixture
def admin_site(transactional_db: None, settings: Any) -> Iterator[str]:
    """The test project in a live server, with the admin's own CSS."""
    from django.test.testcases import LiveServerThread, _StaticFilesHandler

    settings.STATIC_URL = "/static/"
    settings.STATIC_ROOT = str(Path(django.contrib.admin.__file__).parent / "static")
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    thread = LiveServerThread("127.0.0.1", _StaticFilesHandler)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait()
    if thread.error:
        raise thread.error
    try:
        yield f"http://127.0.0.1:{thread.port}"
    finally:
        thread.terminate()


def check(measured: list[dict[str, Any]], labels: set[str]) -> None:
    [drawing] = measured
    assert drawing["problems"] == []
    assert labels <= set(drawing["labels"])


def test_the_dashboard_draws_the_orders_and_task_graphs(dashboard: str, tmp_path: Path) -> None:
    with chromium() as browser:
        look_at_the_dashboard(browser, dashboard, shots_dir(tmp_path))


def look_at_the_dashboard(browser: Any, dashboard: str, shots: Path) -> None:
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    page.set_default_timeout(WAIT * 1000)
    for model, graph, labels in (("orders", OrderStates, {"after 7d"}),
                                 ("tasks", TaskStates, {"after 3 failures"})):
        page.goto(f"{dashboard}/models/{model}/graph")
        page.wait_for_selector("svg.graph")
        page.locator(".graph-box").screenshot(path=str(shots / f"dashboard-{model}.png"))
        check(page.evaluate(MEASURE), labels)
        assert page.locator("svg.graph .node").count() == len(graph.states)


def test_the_admin_draws_the_orders_and_task_graphs(
    admin_site: str, admin_user: Any, tmp_path: Path,
) -> None:
    order = Order.objects.create()
    drawings = {name: str(state_graph_html(graph, current)) for name, graph, current in (
        ("orders", OrderStates, "new"), ("tasks", TaskStates, "ready"))}
    with chromium() as browser:
        look_at_the_admin(browser, admin_site, order.pk, drawings, shots_dir(tmp_path))


def look_at_the_admin(browser: Any, admin_site: str, pk: int, drawings: dict[str, str],
                      shots: Path) -> None:
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    page.set_default_timeout(WAIT * 1000)
    page.goto(f"{admin_site}/admin/login/?next=/admin/orders/order/{pk}/change/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    page.wait_for_selector("svg.graph")
    page.locator(".stator-graph-box").screenshot(path=str(shots / "admin-shop.png"))
    check(page.evaluate(MEASURE), set())
    # The README's orders graph and the task graph, drawn as the admin draws them, in the
    # same page (the test project's models have smaller graphs).
    for name, labels in (("orders", {"after 7d"}), ("tasks", {"after 3 failures"})):
        page.evaluate("html => { document.querySelector('.stator-graph').outerHTML = html; }",
                      drawings[name])
        page.locator(".stator-graph-box").screenshot(path=str(shots / f"admin-{name}.png"))
        check(page.evaluate(MEASURE), labels)
