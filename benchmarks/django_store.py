"""Transitions per second: the Django store against the SQLAlchemy store, same database.

    python benchmarks/django_store.py                      # SQLite file, then PostgreSQL
    python benchmarks/django_store.py --rows 20000 --backend postgresql

Each side drains ``--rows`` rows of the same graph (``JobStates``: waiting -> done, a handler
that writes nothing, so every result takes the batched fast path) with one worker of the same
concurrency and batch size; PostgreSQL runs use a throwaway database, dropped afterwards.
``measure(alias, rows)`` is the function the ``stator bench`` row can call.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "django"), str(ROOT / "src")]
IDLE_WINDOW = 0.05


def _drain(stator: Any, concurrency: int) -> float:
    worker = stator.worker(concurrency=concurrency, until_idle=True, idle_window=IDLE_WINDOW)
    began = time.perf_counter()
    worker.run()
    return time.perf_counter() - began - IDLE_WINDOW


def measure(alias: str, rows: int, concurrency: int = 4) -> dict[str, float]:
    """Rows per second through each store (Django must be set up with djtest's apps)."""
    from django.db import connections
    from djtest.orders.models import Job
    from sqlalchemy import insert
    from test_behaviour import Base, SAJob

    from stator import Stator
    from stator.django._setup import build_stator

    Job.objects.using(alias).bulk_create([Job(kind="ok") for _ in range(rows)], batch_size=1000)
    django_side = build_stator(models=[Job], alias=alias, concurrency=concurrency)
    django_seconds = _drain(django_side, concurrency)
    django_side.store.thread_done()
    assert Job.objects.using(alias).filter(state="done").count() == rows

    from stator._store._django import database_url

    url = database_url(alias).render_as_string(hide_password=False)
    sa_side = Stator(url, [SAJob], concurrency=concurrency)
    Base.metadata.create_all(sa_side.engine)
    sa_side.migrate()
    with sa_side.engine.begin() as conn:
        conn.execute(insert(SAJob), [{"kind": "ok"}] * rows)
    sa_seconds = _drain(sa_side, concurrency)
    sa_side.dispose()
    connections[alias].close()
    return {"django": rows / django_seconds, "sqlalchemy": rows / sa_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    args = parser.parse_args()
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    for backend in backends:
        if backend == "sqlite":
            os.environ["DJTEST_SQLITE"] = str(Path(tempfile.mkdtemp()) / "bench.db")
            os.environ.pop("DJTEST_PG", None)
            print(_in_child(args, backend))
        else:
            import psycopg

            name = f"stator_djbench_{secrets.token_hex(4)}"
            with psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres",
                                 autocommit=True) as admin:
                admin.execute(f'CREATE DATABASE "{name}"')
                try:
                    os.environ["DJTEST_PG"] = name
                    print(_in_child(args, backend))
                finally:
                    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _in_child(args: argparse.Namespace, backend: str) -> str:
    """Each database in a fresh interpreter: Django's settings are read once per process."""
    import subprocess

    code = (
        "import sys; sys.argv = ['x']; import os; "
        "os.environ['DJANGO_SETTINGS_MODULE'] = 'djtest.proc_settings'; "
        f"sys.path[:0] = {[str(ROOT / 'tests' / 'django'), str(ROOT / 'src')]!r}; "
        "import django; django.setup(); "
        "from django.core.management import call_command; "
        "call_command('migrate', run_syncdb=True, verbosity=0); "
        "sys.path.insert(0, %r); import django_store; "
        f"r = django_store.measure('default', {args.rows}, {args.concurrency}); "
        "print(f\"django {r['django']:.0f}/s  sqlalchemy {r['sqlalchemy']:.0f}/s  "
        "ratio {r['django'] / r['sqlalchemy']:.2f}\")"
    ) % str(Path(__file__).parent)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=os.environ, check=False)
    if done.returncode:
        return f"{backend}: failed\n{done.stdout}{done.stderr}"
    return f"{backend} ({args.rows} rows, concurrency {args.concurrency}): {done.stdout.strip()}"


if __name__ == "__main__":
    main()
