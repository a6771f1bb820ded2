"""The issue's contract, literally: the example shop (examples/django_shop) run end to end.

As a new Django user would: ``makemigrations shop`` and ``migrate``; orders inserted by
``create``, ``bulk_create`` and raw SQL; tasks enqueued, deferred and rolled back; then
``manage.py runstator --until-idle``, which must run every StatorModel and every task queue
(tasks enqueued during the run included) and exit 0.  On SQLite and on PostgreSQL, each
step in its own process.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the task backend needs Django >= 6.0")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "django_shop"
STEPS = Path(__file__).with_name("shop_steps.py")
TIMEOUT = 300

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgresql"])
def shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A fresh copy of the example project (no migrations of its own yet) and its env."""
    project = tmp_path / "django_shop"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("*.db*", "__pycache__"))
    for app in ("shop", "courier"):
        for old in (project / app / "migrations").glob("0*.py"):
            old.unlink()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("SHOP_DATABASE", None)
    if request.param == "sqlite":
        yield project, env
        return
    with throwaway_pg_database() as url:
        env["SHOP_DATABASE"] = url
        yield project, env


@contextlib.contextmanager
def throwaway_pg_database() -> Iterator[str]:
    """A new database on the test server (STATOR_TEST_PG), dropped afterwards."""
    import psycopg
    from sqlalchemy import make_url

    server = make_url(
        os.environ.get("STATOR_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    )
    name = f"stator_shop_{secrets.token_hex(5)}"
    try:
        admin = psycopg.connect(
            host=server.host, port=server.port or 5432, user=server.username,
            password=server.password, dbname=server.database or "postgres", autocommit=True,
            connect_timeout=5,
        )
    except psycopg.OperationalError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is not reachable: {exc}")
        pytest.skip(f"PostgreSQL is not reachable: {exc}")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield server.set(drivername="postgresql", database=name).render_as_string(
                hide_password=False
            )
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage(shop: tuple[Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    project, env = shop
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=project, env=env, capture_output=True,
        text=True, timeout=TIMEOUT,
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def step(shop: tuple[Path, dict[str, str]], name: str) -> Any:
    project, env = shop
    done = subprocess.run(
        [sys.executable, str(STEPS), name], cwd=project, env=env, capture_output=True,
        text=True, timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_contract(shop: tuple[Path, dict[str, str]]) -> None:
    manage(shop, "makemigrations", "shop", "courier")
    manage(shop, "migrate")
    manage(shop, "check")

    before = step(shop, "before")
    assert before["fresh"] == [["new", True]] * 7  # every route: `new`, due at once
    assert before["added_status"] == "READY"
    assert before["refreshed_status"] == "READY"
    assert before["rolled_back_found"] is False
    assert before["unserialisable"].startswith("TypeError")
    manage(shop, "place_orders", "6")  # the flaky courier: bookings of even orders fail once

    manage(shop, "runstator", "--until-idle")

    after = step(shop, "after")
    orders = after["orders"]
    paid = [o for o in orders if o["paid"]]
    assert len(paid) == 8 and len(orders) == 13
    for order in orders:
        if order["paid"]:
            assert order["state"] == "shipped", order
            assert order["receipts"] == 1, order
            assert order["history"][-2:] == ["charged", "shipped"], order
        else:
            assert order["state"] == "new", order
            assert order["receipts"] == 0, order

    tasks = {t["id"]: t for t in after["tasks"]}
    assert before["rolled_back_found"] is False
    added, deferred = tasks[before["added"]], tasks[before["deferred"]]
    assert (added["status"], added["return_value"]) == ("SUCCESSFUL", 5)
    assert deferred["status"] == "READY"
    receipts = [t for t in after["tasks"] if t["task"] == "shop.tasks.send_receipt"]
    assert len(receipts) == 8  # one per paid order, each enqueued by a handler during the run
    assert all(t["status"] == "SUCCESSFUL" and t["return_value"].startswith("sent ")
               for t in receipts)
    bookings = [t for t in after["tasks"] if t["task"] == "courier.tasks.book_pickup"]
    assert len(bookings) == 4 and all(t["status"] == "SUCCESSFUL" for t in bookings)
    retried = [t for t in bookings if t["attempts"] == 2]
    assert retried and all(t["errors"] == ["courier.remote.RemoteUnavailable"] for t in retried)
    assert sorted(after["pickups"].values()) == sorted(t["attempts"] for t in bookings)
