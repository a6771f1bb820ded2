"""CPU seconds of a Django process that loads its apps and saves and reads one StatorModel row
(the test project ``tests/django/djtest``, Django's admin installed), for one or more checkouts'
``src`` folders, interleaved: what every web worker and management command pays at its start.

    .venv6/bin/python benchmarks/results/issue-21/app_process_cpu.py ROUNDS SRC [SRC ...]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[3] / "tests" / "django"
WORK = """
import django
django.setup()
from djtest.orders.models import Order
order = Order.objects.create(paid=True)
Order.objects.get(pk=order.pk)
import resource
r = resource.getrusage(resource.RUSAGE_SELF)
print(r.ru_utime + r.ru_stime)
"""


def env_for(folder: Path, src: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(HERE), src]),
            "DJANGO_SETTINGS_MODULE": "djtest.proc_settings",
            "DJTEST_MIGRATIONS": "made_migrations.orders",
            "DJTEST_SQLITE": str(folder / "shop.db")}


def main(rounds: int, sources: list[str]) -> None:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "made_migrations").mkdir()
        (folder / "made_migrations" / "__init__.py").touch()
        setup = ("import django\ndjango.setup()\nfrom django.core.management import call_command\n"
                 "call_command('makemigrations', 'orders', '-v', '0')\n"
                 "call_command('migrate', '-v', '0')\n")
        subprocess.run([sys.executable, "-c", setup], env=env_for(folder, sources[0]),
                       cwd=HERE, check=True)
        seen: dict[str, list[float]] = {src: [] for src in sources}
        for _ in range(rounds):
            for src in sources:
                done = subprocess.run([sys.executable, "-c", WORK], env=env_for(folder, src),
                                      cwd=HERE, check=True, capture_output=True, text=True)
                seen[src].append(float(done.stdout.split()[-1]))
        for src, times in seen.items():
            print(f"{src}: median {statistics.median(times):.3f} s CPU "
                  f"(all: {', '.join(f'{t:.2f}' for t in times)})")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
