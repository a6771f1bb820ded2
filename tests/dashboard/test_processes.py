"""``stator dashboard`` and ``stator run --metrics-port`` as a user runs them: their one-line
refusals, real servers in subprocesses, and a real browser (headless Chromium, driven by
Playwright) watching counts move on the overview and graph pages while a worker runs."""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stator.cli import main

CHROMIUM = os.environ.get("STATOR_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = os.environ.get("STATOR_SCREENSHOTS")  # a directory to copy screenshots into
WAIT = 90.0  # seconds: generous, the machine may be busy

APP = '''
import time
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from stator import State, StateGraph, Stator
from stator.sqlalchemy import StatorMixin


class Base(DeclarativeBase):
    pass


class Delivery(StateGraph):
    queued = State(retry_after=30, max_attempts=2)
    sent = State()
    bounced = State()
    queued.transitions_to(sent)
    queued.fails_to(bounced)

    @classmethod
    def check_queued(cls, row):
        time.sleep({pause})
        if row.id % 10 == 0:
            raise ConnectionError("remote <b>refused</b>")
        return cls.sent


class Message(StatorMixin, Base):
    __tablename__ = "messages"
    state_graph = Delivery
    id: Mapped[int] = mapped_column(primary_key=True)


stator = Stator({url!r}, models=[Message], concurrency=2)
'''

_names = itertools.count()


@pytest.fixture
def app(tmp_path: Path) -> Callable[..., str]:
    """``app(rows, pause)``: an importable APP in tmp_path over a migrated SQLite file
    holding ``rows`` messages; returns its ``module:stator``."""

    def make(rows: int = 0, pause: float = 0.0) -> str:
        name = f"dash_app_{os.getpid()}_{next(_names)}"
        url = f"sqlite:///{tmp_path / (name + '.db')}"
        (tmp_path / f"{name}.py").write_text(APP.format(url=url, pause=pause))
        sys.path.insert(0, str(tmp_path))
        try:
            module = __import__(name)
        finally:
            sys.path.remove(str(tmp_path))
        module.stator.migrate()
        if rows:
            from sqlalchemy import insert
            from sqlalchemy.orm import Session

            with Session(module.stator.engine) as s:
                s.execute(insert(module.Message), [{"id": i} for i in range(1, rows + 1)])
                s.commit()
        module.stator.dispose()
        return f"{name}:stator"

    return make


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    return int(info.value.code or 0), capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_dashboard_on_another_interface_needs_a_token(
    app: Callable[..., str], capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STATOR_DASHBOARD_TOKEN", raising=False)
    code, err = run_cli(capsys, "dashboard", app(), "--host", "0.0.0.0")
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: refusing to serve")


@pytest.mark.parametrize("token", [" ", "short", " " * 20, "fifteen-chars15"])
def test_a_dashboard_beyond_loopback_needs_a_long_token(
    app: Callable[..., str], capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, token: str,
) -> None:
    class Listening(Exception):
        pass

    def listen(host: str, port: int) -> None:
        raise Listening(host)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("stator.cli.dashboard._listen", listen)
    code, err = run_cli(capsys, "dashboard", app(), "--host", "0.0.0.0", "--token", token)
    assert code == 2
    assert err.count("\n") == 1 and "fewer than 16 characters" in err
    # On loopback a short token passes the checks (no one else can reach it to guess).
    with pytest.raises(Listening):
        main(["dashboard", app(), "--token", token])


def test_a_second_dashboard_on_a_port_in_use_exits_2_with_one_line(
    app: Callable[..., str], capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, busy_port: int,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, err = run_cli(capsys, "dashboard", app(), "--port", str(busy_port))
    assert code == 2
    assert err.count("\n") == 1 and f"cannot listen on 127.0.0.1:{busy_port}" in err
    assert "Traceback" not in err


def test_worker_metrics_port_in_use_exits_2_with_one_line(
    app: Callable[..., str], capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, busy_port: int,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, err = run_cli(capsys, "run", app(), "--until-idle", "--metrics-port", str(busy_port))
    assert code == 2
    assert err.count("\n") == 1 and "cannot serve metrics" in err


# -- real processes ---------------------------------------------------------------------------


def stator_cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", "from stator.cli import main; main()", *args]


def get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())
    except OSError:
        return None


def wait_for(check: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def processes() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
        """Output goes to a file (a pipe nobody reads could fill and block the process).
        The app's folder is added to PYTHONPATH, not put in its place: scripts/mutants.sh
        points it at a mutated copy of the source, which the child must run too."""
        inherited = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(cwd), *([inherited] if inherited else [])])}
        with open(cwd / f"process-{len(started)}.log", "w") as log:
            proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, text=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def status_of(url: str, headers: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.mark.parametrize("proxy", [None, "127.0.0.1"])
def test_x_forwarded_for_is_believed_only_from_a_trusted_proxy(
    app: Callable[..., str], tmp_path: Path, processes: Callable[..., Any], proxy: str | None,
) -> None:
    """On loopback every local user is 127.0.0.1, from which uvicorn believes
    X-Forwarded-For by default: a new address per wrong token would then never wait."""
    port = free_port()
    args = ["dashboard", app(), "--port", str(port), "--token", "t"]
    dashboard = processes(stator_cmd(*args, *(["--trusted-proxy", proxy] if proxy else [])),
                          tmp_path)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: get(base + "/login") is not None or dashboard.poll() is not None,
             "the dashboard to answer")
    assert dashboard.poll() is None, (tmp_path / "process-0.log").read_text()
    answers = [status_of(base + "/api/overview.json", {
        "authorization": "Bearer wrong", "x-forwarded-for": f"10.0.0.{n}"}) for n in range(6)]
    if proxy:
        assert answers == [401] * 6  # six clients behind the proxy, one wrong token each
    else:
        # One client: waits of 1, 2, 4, 8, 16 s between its tries; six in a row cannot all
        # be looked at.
        assert answers[0] == 401 and 429 in answers, answers


def test_a_trusted_proxy_must_be_an_address(
    app: Callable[..., str], capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, err = run_cli(capsys, "dashboard", app(), "--token", "t", "--trusted-proxy", "proxy")
    assert code == 2
    assert err == "error: --trusted-proxy 'proxy' is not an IP address or network\n"


@pytest.mark.slow
def test_stator_run_serves_its_metrics(
    app: Callable[..., str], tmp_path: Path, processes: Callable[..., Any],
) -> None:
    target = app(rows=30)
    port = free_port()
    worker = processes(stator_cmd("run", target, "--metrics-port", str(port)), tmp_path)

    def moved() -> float:
        text = get(f"http://127.0.0.1:{port}/metrics")
        if text is None:
            return 0.0
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == "stator_transitions_total" and s.labels["to"] == "sent")

    assert wait_for(lambda: moved() == 27, "27 transitions to sent")
    assert worker.poll() is None


@pytest.mark.slow
def test_the_dashboard_in_a_browser_follows_a_running_worker(
    app: Callable[..., str], tmp_path: Path, processes: Callable[..., Any],
) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set "
                    "STATOR_CHROMIUM)")
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    target = app(rows=120, pause=0.1)
    port = free_port()
    dashboard = processes(stator_cmd("dashboard", target, "--port", str(port), "--token", "t"),
                          tmp_path)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: get(base + "/") is not None or dashboard.poll() is not None,
             "the dashboard to answer")
    assert dashboard.poll() is None, (tmp_path / "process-0.log").read_text()
    shots = tmp_path / "shots"
    shots.mkdir()
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.set_default_timeout(WAIT * 1000)
            refused: list[str] = []  # what the Content-Security-Policy blocked, if anything
            page.on("console", lambda m: refused.append(m.text)
                    if "Content Security Policy" in m.text else None)
            page.goto(base + "/")
            # Every page needs the token: the browser lands on the sign-in page first.
            assert page.url == base + "/login?next=%2F"
            page.fill('input[name="token"]', "t")
            page.fill('input[name="who"]', "ann")
            page.click("button")
            page.wait_for_url(base + "/")
            sent = page.locator('[data-key="rows:messages:sent"]')
            assert sent.text_content() == "0"
            assert page.locator('[data-key="rows:messages:queued"]').text_content() == "120"
            processes(stator_cmd("run", target, "--until-idle", "--idle-window", "2"), tmp_path)
            # The page refreshes itself: the count changes without a reload.
            page.wait_for_function(
                "() => !['', '0'].includes(document.querySelector("
                "'[data-key=\"rows:messages:sent\"]').textContent)")
            # The workers table follows too, without a reload: the worker appears …
            workers = "document.querySelector('tbody[data-table=\"workers\"]')"
            page.wait_for_function(
                f"() => {workers}.querySelectorAll('tr:first-child td').length === 7")
            row = page.locator('tbody[data-table="workers"] tr').first
            assert "Message" in (row.text_content() or "")
            assert row.locator("td").nth(2).get_attribute("class") == "n"  # the pid column
            page.screenshot(path=str(shots / "dashboard-overview.png"), full_page=True)
            page.wait_for_function(
                "() => document.querySelector('[data-key=\"rows:messages:sent\"]')"
                ".textContent === '108'")
            page.wait_for_function(
                "() => document.querySelector('[data-key=\"workers\"]').textContent === '0'")
            # … and leaves it once it has stopped.
            page.wait_for_function(f"() => {workers}.textContent.trim() === 'no live worker'")
            # The throughput chart: bars from the worker's stats (written as it stops), set by
            # the page's own refresh; the footer's two parts separated once, nothing dangling.
            page.wait_for_function(
                "() => [...document.querySelectorAll('svg.chart .bar')]"
                ".some(b => b.getBoundingClientRect().height > 10)")
            assert page.locator("svg.chart .bar").count() == 10
            peak = page.locator('[data-key="peak:messages"]').text_content() or ""
            assert peak.startswith("peak ") and peak != "peak 0/min"
            assert page.locator("footer #updated").text_content().startswith("updated ")
            assert page.evaluate(  # the separator is the stamp's, drawn once it has a text
                "getComputedStyle(document.getElementById('updated'), '::before').content"
            ) == '" · "'
            assert page.evaluate(
                "getComputedStyle(document.querySelector('footer span'), '::before').content"
            ) == "none"
            page.screenshot(path=str(shots / "dashboard-throughput.png"), full_page=True)

            page.goto(base + "/models/messages/graph")
            node = page.locator('[data-key="node:sent"]')
            assert node.text_content() == "108 rows"
            # Edge rates come from the worker's stats, written as it stops.
            page.wait_for_function(
                "() => document.querySelector('[data-key=\"edge:queued:sent\"]')"
                ".textContent.endsWith('/min')")
            assert "<b>" not in page.content().split("</svg>")[0]
            page.screenshot(path=str(shots / "dashboard-graph.png"), full_page=True)

            page.goto(base + "/errors")
            assert page.get_by_text("remote <b>refused</b>").first.is_visible()
            assert refused == []
        finally:
            browser.close()
    if SCREENSHOTS:
        for shot in shots.iterdir():
            shutil.copy(shot, Path(SCREENSHOTS) / shot.name)
