"""``manage.py`` end to end, in real processes, on SQLite and PostgreSQL: the contract's
inserts (create, bulk_create, raw SQL), ``runstator --until-idle``, signals, checks."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
TIMEOUT = 120

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgresql"])
def project(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a project on a fresh database, migrated."""
    # The orders app's migrations are made afresh in a package of the test's own, then
    # applied: what a project does, on Django 5.2 as on 6.
    (tmp_path / "made_migrations").mkdir()
    (tmp_path / "made_migrations" / "__init__.py").touch()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(HERE), str(SRC)]),
           "DJANGO_SETTINGS_MODULE": "djtest.proc_settings",
           "DJTEST_MIGRATIONS": "made_migrations.orders"}
    if request.param == "sqlite":
        env["DJTEST_SQLITE"] = str(tmp_path / "shop.db")
        migrate(env)
        yield env
        return
    name = f"stator_djproc_{secrets.token_hex(5)}"
    try:
        admin = psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres",
                                autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is not reachable: {exc}")
        pytest.skip(f"PostgreSQL is not reachable: {exc}")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            env["DJTEST_PG"] = name
            migrate(env)
            yield env
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate(env: dict[str, str]) -> None:
    """``makemigrations orders`` then ``migrate``: the migration holds literals, not the graph."""
    made = manage(env, "makemigrations", "orders")
    assert "Create model Order" in made.stdout, made.stdout
    manage(env, "migrate")


def manage(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "django", *args], env=env, capture_output=True, text=True,
        timeout=TIMEOUT, cwd=HERE,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"manage.py {' '.join(args)} exited {done.returncode}:\n"
                             f"{done.stdout}\n{done.stderr}")
    return done


def shell(env: dict[str, str], code: str) -> Any:
    """Run ``code`` in a Django shell of the project; it sets ``result`` (JSON-encoded back)."""
    done = manage(env, "shell", "-c", f"import json\n{code}\nprint('RESULT=' + json.dumps(result))")
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT=")][-1]
    return json.loads(line.removeprefix("RESULT="))


INSERT_THREE_WAYS = """
import json
from django.db import connection
from djtest.orders.models import Order
Order.objects.create(paid=True, note="create")
Order.objects.create(paid=False, note="unpaid")
Order.objects.bulk_create([Order(paid=True, note="bulk1"), Order(paid=True, note="bulk2")])
with connection.cursor() as cursor:
    cursor.execute("INSERT INTO orders_order (paid, note) VALUES (%s, %s)", [True, "raw"])
result = sorted(
    [o.note, o.state, o.state_next is not None, o.state_attempts]
    for o in Order.objects.all()
)
"""

AFTER = """
import json
from djtest.orders.models import Order, Receipt
result = sorted(
    [o.note, o.state, [h[0] for h in (o.state_history or [])],
     Receipt.objects.filter(order=o).count()]
    for o in Order.objects.all()
)
"""


def test_contract_rows_start_new_and_runstator_until_idle(project: dict[str, str]) -> None:
    before = shell(project, INSERT_THREE_WAYS)
    assert before == sorted([
        [note, "new", True, 0] for note in ("create", "unpaid", "bulk1", "bulk2", "raw")
    ])
    run = manage(project, "runstator", "--until-idle")
    assert run.returncode == 0
    after = shell(project, AFTER)
    assert after == sorted(
        [[note, "charged", ["charged"], 1] for note in ("create", "bulk1", "bulk2", "raw")]
        + [["unpaid", "new", [], 0]]
    )
    status = json.loads(manage(project, "stator", "status", "--json").stdout)
    (orders,) = [m for m in status["models"] if m["model"] == "orders.Order"]
    assert orders["table"] == "orders_order"
    states = {s["state"]: s["rows"] for s in orders["states"]}
    assert states == {"new": 1, "charged": 4, "shipped": 0}
    graph = manage(project, "stator", "graph", "--format", "dot").stdout
    assert "OrderStates.new -> OrderStates.charged" in graph.replace('"', "")


def _start(env: dict[str, str], tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    alive = tmp_path / "alive"
    proc = subprocess.Popen(
        [sys.executable, "-m", "django", "runstator", "--liveness-file", str(alive)],
        env=env, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    deadline = time.monotonic() + TIMEOUT
    while not alive.exists():  # the first heartbeat: the worker is up
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "runstator never started"
        time.sleep(0.05)
    return proc, alive


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_one_signal_stops_gracefully(
    project: dict[str, str], tmp_path: Path, signum: int
) -> None:
    proc, _ = _start(project, tmp_path)
    proc.send_signal(signum)
    output = proc.communicate(timeout=TIMEOUT)[0]
    assert proc.returncode == 0, output
    assert "stopped (signal" in output


def test_second_sigint_exits_at_once(project: dict[str, str], tmp_path: Path) -> None:
    shell(project, "from djtest.orders.models import Job\nJob.objects.create(kind='slow')\n"
                   "result = 1")
    mark = tmp_path / "running"
    proc, _ = _start({**project, "DJTEST_SLOW_MARK": str(mark)}, tmp_path)
    deadline = time.monotonic() + TIMEOUT
    while not mark.exists():  # its handler runs: a graceful stop would wait for it
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    assert proc.stdout is not None
    for line in proc.stdout:  # signals sent together may be delivered as one: wait for it
        if "stopping gracefully" in line:
            break
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130


def test_check_fails_with_stator_errors(project: dict[str, str]) -> None:
    env = {**project, "DJANGO_SETTINGS_MODULE": "djtest.broken_settings"}
    done = manage(env, "check", check=False)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "(stator.E001) Forgotten is a StatorModel without a state_graph" in done.stderr
    assert "(stator.E004) Takahe.state_locked_until" in done.stderr
    assert "replaced it with state_next" in done.stderr
    assert "(stator.E003) Takahe.state_history must be a JSONField" in done.stderr
    run = manage(env, "runstator", "--until-idle", check=False)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr and "stator.E001" in run.stderr


def test_unknown_label_is_one_error_line(project: dict[str, str]) -> None:
    done = manage(project, "runstator", "nosuch.Model", "--until-idle", check=False)
    assert done.returncode == 2
    assert "error:" in done.stderr and "no StatorModel matches 'nosuch.Model'" in done.stderr
    assert "Traceback" not in done.stderr
