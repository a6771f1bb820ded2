"""The Django side of ``stator bench --scenario django``, in a process of its own (Django's
settings are configured once per process): ``python -m stator._bench._django_child ROWS
CONCURRENCY BATCH_SIZE [plain]`` (``plain``: the steps with plain rows), its database URL in
``STATOR_BENCH_DB`` (not on the command line, where ``ps`` would show its password), prints
one JSON line, the drain's rate and CPU."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from sqlalchemy import make_url

from .._store._dialects import dialect_for


def django_database(url: str) -> dict[str, Any]:
    """Django's ``DATABASES`` entry for a SQLAlchemy URL (SQLite file or PostgreSQL)."""
    parsed = make_url(url)
    return dialect_for(parsed.get_backend_name()).django_database(parsed)


URL_VARIABLE = "STATOR_BENCH_DB"


def main(argv: list[str]) -> None:
    url = os.environ.pop(URL_VARIABLE)
    rows, concurrency, batch_size = int(argv[0]), int(argv[1]), int(argv[2])
    from django.conf import settings
    from django.core.management import call_command

    import django

    settings.configure(
        DATABASES={"default": django_database(url)},
        INSTALLED_APPS=["stator.django", "stator._bench.djapp"],
        USE_TZ=True,
        STATOR={"CONCURRENCY": concurrency, "BATCH_SIZE": batch_size},
    )
    django.setup()
    call_command("migrate", run_syncdb=True, verbosity=0)

    from stator.django._setup import build_stator

    from .djapp.models import BenchDjangoPlainRow, BenchDjangoRow

    model: Any = BenchDjangoPlainRow if argv[3:] == ["plain"] else BenchDjangoRow
    model.objects.bulk_create([model() for _ in range(rows)], batch_size=1000)
    stator = build_stator(models=[model])
    worker = stator.worker(until_idle=True, idle_window=0.0)
    cpu0, began = time.process_time(), time.perf_counter()
    summary = worker.run()
    seconds = time.perf_counter() - began
    cpu = time.process_time() - cpu0
    print(json.dumps({
        "per_second": summary.transitions / seconds, "transitions": summary.transitions,
        "seconds": seconds, "cpu_per_1000": cpu / max(summary.transitions, 1) * 1000,
    }))


if __name__ == "__main__":
    main(sys.argv[1:])
