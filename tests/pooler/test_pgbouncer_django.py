"""The Django store through PgBouncer in transaction-pooling mode: ``manage.py migrate`` and
``runstator`` on a project whose database is reached through the pooler (with psycopg's
``prepare_threshold: None`` and no server-side cursors, as a pooled Django project needs).
Claims, fenced writes and the handlers' own ORM writes (slow path) go through PgBouncer;
wake-ups go straight to the server (``STATOR["LISTEN_URL"]``), or, without it, the worker
says once that notifications do not arrive and polls.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from processes.procs import wait_until

from .conftest import PgBouncer

pytest.importorskip("django")

pytestmark = pytest.mark.slow

DJANGO_TESTS = Path(__file__).resolve().parents[1] / "django"
SRC = Path(__file__).resolve().parents[2] / "src"
NO_NOTIFY = "notifications do not arrive"
TIMEOUT = 120


def project(bouncer: PgBouncer, listen_url: bool) -> dict[str, str]:
    env = {
        **os.environ, "PYTHONPATH": os.pathsep.join([str(DJANGO_TESTS), str(SRC)]),
        "DJANGO_SETTINGS_MODULE": "djtest.proc_settings", "DJTEST_PG": "postgres",
        "DJTEST_PG_POOLED": "1", "STATOR_TEST_PG_HOST": "127.0.0.1",
        "STATOR_TEST_PG_PORT": str(bouncer.port), "STATOR_TEST_PG_USER": "postgres",
    }
    if listen_url:
        env["DJTEST_LISTEN_URL"] = bouncer.cluster.url
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "django", *args], env=env, capture_output=True, text=True,
        timeout=TIMEOUT, cwd=DJANGO_TESTS,
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def shell(env: dict[str, str], code: str) -> object:
    out = manage(env, "shell", "-c", f"import json\n{code}\nprint('RESULT=' + json.dumps(result))")
    line = [x for x in out.splitlines() if x.startswith("RESULT=")][-1]
    return json.loads(line.removeprefix("RESULT="))


ADD = """
from djtest.orders.models import Order
Order.objects.bulk_create([Order(paid=True, note="{note}") for _ in range({n})])
Order.objects.create(paid=False, note="unpaid")
result = 1
"""

COUNT = """
from djtest.orders.models import Order, Receipt
result = [Order.objects.filter(state="charged").count(), Receipt.objects.count(),
          Order.objects.filter(state="new").count()]
"""


def charged(env: dict[str, str]) -> list[int]:
    value = shell(env, COUNT)
    assert isinstance(value, list)
    return value


@pytest.mark.parametrize("listen_url", [True, False], ids=["listen-url", "pooler-only"])
def test_the_django_store_through_pgbouncer(
    pgbouncer: PgBouncer, tmp_path: Path, listen_url: bool
) -> None:
    env = project(pgbouncer, listen_url)
    manage(env, "migrate", "--run-syncdb", "-v", "0")
    shell(env, ADD.format(note="first", n=60))
    manage(env, "runstator", "--until-idle")
    assert charged(env) == [60, 60, 1]  # each receipt committed with its transition

    log = tmp_path / "runstator.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runstator", "-v", "2"], env=env,
            cwd=DJANGO_TESTS, stdout=out, stderr=subprocess.STDOUT, text=True,
        )
    try:
        if not listen_url:  # the late rows must be found by polling
            wait_until(lambda: NO_NOTIFY in log.read_text(),
                       "the worker to find that notifications do not arrive", timeout=TIMEOUT)
        shell(env, ADD.format(note="late", n=40))  # work arriving while the worker idles
        wait_until(lambda: charged(env)[:2] == [100, 100], "the late orders charged",
                   timeout=TIMEOUT)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(TIMEOUT)
    output = log.read_text()
    assert proc.returncode == 0, output
    assert "Traceback" not in output, output
    assert output.count(NO_NOTIFY) == (0 if listen_url else 1), output
