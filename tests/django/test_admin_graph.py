"""The admin change page draws the row's state graph: inline SVG (the dashboard's drawing, no
script, no CDN) with the row's state marked, and the text form to copy; checked in the HTML
and in a real headless Chromium, light and dark."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django.contrib.admin
import pytest
from djtest.orders.models import Job, JobStates, Order, OrderStates

from stator import State, StateGraph
from stator.django.admin import state_graph_html

HERE = Path(__file__).resolve().parent
CHROMIUM = os.environ.get("STATOR_CHROMIUM", "/usr/bin/chromium")
SHOT = Path("/tmp/admin_graph.png")
WAIT = 60.0  # seconds: generous, the machine may be busy


def graph_svg(page: str) -> str:
    """The one drawn graph (the admin has SVG icons of its own)."""
    [svg] = re.findall(r'<svg [^>]*class="graph".*?</svg>', page, flags=re.S)
    return str(svg)


def nodes(page: str) -> dict[str, str]:
    """Each drawn node's state name -> its class attribute."""
    return {name: cls for cls, name in
            re.findall(r'<g class="(node[^"]*)" id="node-([^"]+)"', graph_svg(page))}


@pytest.mark.django_db(transaction=True)
def test_the_change_page_draws_the_graph_with_the_rows_state_marked(admin_client: Any) -> None:
    order = Order.objects.create()
    order.transition_perform(OrderStates.charged)
    page = admin_client.get(f"/admin/orders/order/{order.pk}/change/").content.decode()
    assert "<script" not in graph_svg(page) and "http" not in graph_svg(page).replace(
        'xmlns="http://www.w3.org/2000/svg"', "")  # nothing to run, nothing to fetch
    drawn = nodes(page)
    assert set(drawn) == set(OrderStates.states) == {"new", "charged", "shipped"}
    assert [name for name, cls in drawn.items() if "current" in cls.split()] == ["charged"]
    assert drawn["new"] == "node initial" and drawn["shipped"] == "node terminal"
    assert 'aria-current="true"' in page and "Currently in <b>charged</b>." in page
    edges = sum(len(s.children) for s in OrderStates.states.values())
    assert graph_svg(page).count('class="edge') == edges
    assert ".stator-graph svg.graph .node.current rect" in page  # its styles come with it
    # The text form, folded away, still there to copy.
    assert "<details><summary>Mermaid source</summary>" in page
    assert "OrderStates__new --&gt; OrderStates__charged" in page


@pytest.mark.django_db(transaction=True)
def test_timed_and_exhausted_edges_are_labelled_and_dot_is_the_text(admin_client: Any) -> None:
    job = Job.objects.create()
    page = admin_client.get(f"/admin/orders/job/{job.pk}/change/").content.decode()
    drawn = nodes(page)
    assert set(drawn) == set(JobStates.states)
    assert [name for name, cls in drawn.items() if "current" in cls] == [job.state]
    assert 'class="edge exhausted"' in page and ">after 3 failures</text>" in page
    assert "<summary>Graphviz dot source</summary>" in page and "digraph" in page


def test_everything_written_is_escaped() -> None:
    start, end = State(externally_progressed=True), State()
    start.transitions_to(end)
    # Names that would break the markup if written unescaped (code cannot spell them, but a
    # graph built with type() can).
    odd = type("Odd", (StateGraph,), {"<b>&start": start, 'end"><i>': end})
    html = str(state_graph_html(odd, "<b>&start"))
    assert "<b>&start" not in html and "<i>" not in html
    assert 'id="node-&lt;b&gt;&amp;start"' in html and 'id="node-end&quot;&gt;&lt;i&gt;"' in html
    assert 'class="node initial current"' in html
    assert "Currently in <b>&lt;b&gt;&amp;start</b>." in html
    unknown = str(state_graph_html(odd, "<i>gone</i>", "dot"))
    assert "Currently in <b>&lt;i&gt;gone&lt;/i&gt;</b>, not a state of Odd." in unknown
    assert "<i>" not in unknown and "aria-current" not in unknown


def test_the_admin_needs_no_dashboard_extra() -> None:
    """``stator-engine[django]`` has Django only: the admin must draw without Starlette or
    Jinja2 (their imports fail here, as on such an install)."""
    code = (
        "import sys\n"
        "for name in ('starlette', 'jinja2', 'uvicorn', 'prometheus_client', 'multipart'):\n"
        "    sys.modules[name] = None\n"
        "import django; django.setup()\n"
        "from djtest.orders.models import Order\n"
        "from stator.django.admin import state_graph_html\n"
        "assert '<svg' in state_graph_html(Order.state_graph, 'new')\n"
        "assert not [m for m in sys.modules if m.startswith('stator.dashboard')]\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "djtest.settings",
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# -- in a real browser ----------------------------------------------------------------------


@pytest.fixture
def admin_site(transactional_db: None, settings: Any) -> Iterator[str]:
    """The test project in a live server, the admin's own CSS served too (so the page looks
    as it does for users: this project's test settings have no staticfiles app)."""
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


def test_the_change_page_draws_the_graph_in_chromium(
    admin_site: str, admin_user: Any,
) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set "
                    "STATOR_CHROMIUM)")
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    order = Order.objects.create()
    order.transition_perform(OrderStates.charged)
    job = Job.objects.create()  # here: no database calls inside Playwright's event loop
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            for scheme, shot in (("light", SHOT), ("dark", SHOT.with_stem(SHOT.stem + "_dark"))):
                context = browser.new_context(viewport={"width": 1200, "height": 900},
                                              color_scheme=scheme)
                page = context.new_page()
                page.set_default_timeout(WAIT * 1000)
                page.goto(f"{admin_site}/admin/login/?next=/admin/orders/order/{order.pk}/"
                          "change/")
                page.fill("#id_username", "admin")
                page.fill("#id_password", "password")
                page.click("input[type=submit]")
                page.wait_for_selector("svg.graph")
                # The admin's own stylesheet is there (the page is as users see it).
                assert page.evaluate(
                    "getComputedStyle(document.body).getPropertyValue('--body-bg').trim()"
                ) == ("#121212" if scheme == "dark" else "#fff")
                boxes = page.locator("svg.graph .node rect")
                assert boxes.count() == len(OrderStates.states)
                for i in range(boxes.count()):
                    box = boxes.nth(i).bounding_box()
                    assert box is not None and box["width"] > 100 and box["height"] > 30
                current = page.locator("svg.graph .node.current")
                assert current.count() == 1 and current.locator(".name").text_content() == \
                    "charged"
                # Styled by its own rules: the marked box stands out, names are readable
                # on the theme's background (light text in the dark theme, dark in light).
                styles = page.evaluate("""() => {
                    const q = s => getComputedStyle(document.querySelector(s));
                    return {cur: q('svg.graph .node.current rect').strokeWidth,
                            other: q('svg.graph .node.initial rect').strokeWidth,
                            name: q('svg.graph .node .name').fill,
                            edge: q('svg.graph .edge path').fill};
                }""")
                assert float(styles["cur"].removesuffix("px")) > float(
                    styles["other"].removesuffix("px"))
                assert styles["name"] == ("rgb(238, 238, 238)" if scheme == "dark"
                                          else "rgb(51, 51, 51)")
                assert styles["edge"] == "none"  # not filled black, as unstyled paths are
                # The text form is folded away, and opens.
                assert not page.locator("pre.stator-graph-source").is_visible()
                page.locator("summary", has_text="Mermaid source").click()
                assert "stateDiagram-v2" in page.locator("pre.stator-graph-source").inner_text()
                page.locator("summary", has_text="Mermaid source").click()
                # All of it in the field's row, or scrolling in its own box: none cut off.
                inside = page.evaluate("""() => {
                    const box = document.querySelector('.stator-graph-box');
                    const row = box.closest('.form-row').getBoundingClientRect();
                    const r = box.getBoundingClientRect();
                    return r.left >= row.left && r.right <= row.right
                        && (box.scrollWidth <= box.clientWidth
                            || getComputedStyle(box).overflowX === 'auto');
                }""")
                assert inside
                page.screenshot(path=str(shot), full_page=True)
                # A give-up edge: drawn in the error colour, its label written on it.
                page.goto(f"{admin_site}/admin/orders/job/{job.pk}/change/")
                label = page.locator("svg.graph .edge.exhausted .label")
                assert label.text_content() == "after 3 failures"
                box = label.bounding_box()
                assert box is not None and box["width"] > 40
                page.screenshot(path=str(shot.with_stem(shot.stem + "_job")), full_page=True)
                context.close()
        finally:
            browser.close()
