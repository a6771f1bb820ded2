"""The dashboard's pieces in a Django project: migration 0004 brings Stator's schema to
version 3, ``runstator`` honours a paused model, and ``runstator --metrics-port`` serves the
worker's metrics (or says in one line why it cannot)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_django_processes import HERE, manage, project, shell

from stator._store._schema import SCHEMA_VERSION

__all__ = ["project"]  # the fixture, shared with the other process tests
pytestmark = pytest.mark.slow

SCHEMA = """
from django.db import connection
with connection.cursor() as c:
    c.execute("SELECT version FROM stator_schema")
    version = c.fetchone()[0]
result = [version, sorted(t for t in connection.introspection.table_names()
                          if t in ("stator_paused", "stator_actions", "stator_edge_stats"))]
"""

DOWNGRADE = """
from django.db import connection
with connection.cursor() as c:
    for t in ("stator_paused", "stator_actions", "stator_edge_stats"):
        c.execute(f"DROP TABLE {t}")
    c.execute("UPDATE stator_schema SET version = 2")
result = True
"""

PAUSE = """
from stator.django._setup import build_stator
from stator._store import _operator_actions
from djtest.orders.models import Order
Order.objects.create(paid=True, note="x")
s = build_stator(models=[Order])
result = _operator_actions.set_paused(s.store, "orders_order", True, s.clock.now(), "test")
"""

STATES = """
from djtest.orders.models import Order
result = sorted(o.state for o in Order.objects.all())
"""


def test_migration_0004_brings_the_schema_up_to_date(project: dict[str, str]) -> None:
    # 0004 made version 3 (the dashboard's tables); later migrations only add to it.
    tables = ["stator_actions", "stator_edge_stats", "stator_paused"]
    assert shell(project, SCHEMA) == [SCHEMA_VERSION, tables]
    manage(project, "migrate", "stator", "0003")
    shell(project, DOWNGRADE)  # a database migrated before 0004 existed
    assert shell(project, SCHEMA) == [2, []]
    manage(project, "migrate")
    assert shell(project, SCHEMA) == [SCHEMA_VERSION, tables]
    check = manage(project, "makemigrations", "stator", "--check", "--dry-run", check=False)
    assert check.returncode == 0, check.stdout + check.stderr


def test_runstator_leaves_a_paused_model_alone(project: dict[str, str]) -> None:
    assert shell(project, PAUSE) is True
    manage(project, "runstator", "--until-idle", "--idle-window", "0.5")
    assert shell(project, STATES) == ["new"]


def test_runstator_metrics_port_in_use_is_one_error_line(project: dict[str, str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = manage(project, "runstator", "--until-idle", "--metrics-port", str(port),
                      check=False)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "cannot serve metrics" in done.stderr


def test_runstator_serves_the_workers_metrics(project: dict[str, str], tmp_path: Path) -> None:
    shell(project, "from djtest.orders.models import Order\n"
                   "Order.objects.bulk_create([Order(paid=True) for _ in range(5)])\n"
                   "result = True")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(tmp_path / "runstator.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runstator", "--metrics-port", str(port)],
            env=project, cwd=HERE, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        moved = 0.0
        while time.monotonic() < deadline and moved < 5:
            time.sleep(0.2)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                continue
            moved = sum(s.value for f in text_string_to_metric_families(text)
                        for s in f.samples if s.name == "stator_transitions_total")
        assert moved == 5, (tmp_path / "runstator.log").read_text()
    finally:
        proc.terminate()
        proc.wait(60)


def test_manage_py_stator_dashboard_serves_the_projects_models(
    project: dict[str, str], tmp_path: Path,
) -> None:
    shell(project, "from djtest.orders.models import Order\n"
                   "Order.objects.bulk_create([Order(paid=True) for _ in range(3)])\n"
                   "result = True")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(tmp_path / "dashboard.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "stator", "dashboard", "--port", str(port)],
            env=project, cwd=HERE, stdout=log, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        page = None
        while page is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            try:
                with urllib.request.urlopen(base + "/api/overview.json", timeout=5) as r:
                    page = r.read().decode()
            except OSError:
                continue
        assert page is not None, (tmp_path / "dashboard.log").read_text()
        assert json.loads(page)["values"]["rows:orders_order:new"] == "3"
        with urllib.request.urlopen(base + "/models/orders_order/graph", timeout=5) as r:
            assert 'id="node-charged"' in r.read().decode()
        with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
            rows = [s for f in text_string_to_metric_families(r.read().decode())
                    for s in f.samples if s.name == "stator_rows"
                    and s.labels["model"] == "orders_order"]
        assert sum(s.value for s in rows) == 3
        assert {s.labels["model_label"] for s in rows} == {"orders.Order"}
    finally:
        proc.terminate()
        proc.wait(60)


def test_manage_py_stator_dashboard_refuses_other_interfaces_without_a_token(
    project: dict[str, str],
) -> None:
    env = {k: v for k, v in project.items() if k != "STATOR_DASHBOARD_TOKEN"}
    done = manage(env, "stator", "dashboard", "--host", "0.0.0.0", check=False)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "refusing to serve" in done.stderr
    done = manage(project, "stator", "dashboard", "--trusted-proxy", "nginx", check=False)
    assert done.returncode == 2
    assert done.stderr == "error: --trusted-proxy 'nginx' is not an IP address or network\n"


KEYS = """
from starlette.testclient import TestClient
from stator.dashboard import create_app
from stator.django._setup import build_stator
from djtest.orders.models import Order
Order.objects.create(paid=True, note="x")
c = TestClient(create_app(build_stator(models=[Order])), base_url="http://localhost",
               raise_server_exceptions=False)
rows = "/models/orders_order/rows"
result = [c.get(rows + "/" + pk).status_code for pk in ("abc", "2147483648", "9" * 30)]
result += [c.get(rows, params={"after": after}).status_code
           for after in ('["abc"]', "[" + "9" * 30 + "]")]
result += [c.get(rows + "/1").status_code]
"""


def test_keys_and_cursors_no_row_can_have_are_404_and_400_over_django_models(
    project: dict[str, str],
) -> None:
    """Django's columns have no Python type here: the key's SQL type decides."""
    assert shell(project, KEYS) == [404, 404, 404, 400, 400, 200]
