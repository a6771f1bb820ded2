"""Stator's ``django.tasks`` backend against the reference database backend, same run.

    python benchmarks/django_tasks.py [--db sqlite|postgresql ...] [--tasks N]
        [--stator-tasks 20000] [--reference-tasks 2000] [--repeats 3]
        [--latency-samples 40] [--json]
    python benchmarks/django_tasks.py --startup 5 [--db ...]

``--startup N``: N rounds, both backends alternately in the same run, of: one task enqueued,
a worker process started (Stator: ``runstator``; reference: ``db_worker
--no-startup-delay``, persistent connections), seconds until the task function starts; then
SIGTERM to the idle worker and seconds until the process has exited; and the worker's CPU
seconds when the task started (user + system, less sensitive to load).  Medians.  Stator's
sources are compiled to ``__pycache__`` first, as pip compiles the reference's at install.

For each database and backend: ``migrate`` a fresh database, enqueue no-op tasks inside one
transaction (enqueue rate), drain them with one worker process (Stator: ``manage.py
runstator --until-idle``; reference: ``manage.py db_worker --batch --interval 0``) and report
tasks/s as finished tasks / (last finish - first start); then, with an idle worker running,
enqueue tasks one at a time and report the pickup latency (enqueue → start) and the idle
worker's CPU.  The reference runs with persistent connections (``CONN_MAX_AGE=None``, its
best case) and with Django's default (0).  Needs Django >= 6.0 and ``django-tasks-db``
(``pip install -e '.[django,bench]' django-tasks-db``).

A drain of a few thousand tasks lasts under a second for Stator, so one run's rate moves with
whatever else the machine does in that second.  So the drain is longer and repeated:
``--stator-tasks`` (default 20,000) and ``--reference-tasks`` (default 2,000: it is ten
times slower, and the figure is a rate) tasks per drain, or ``--tasks N`` for both;
``--repeats R`` (default 3) drains, each on a fresh database, with the best and the median
rate printed.  Beside the wall rate, the worker's own CPU per task (user + system, from
``wait4``, less the CPU of the same worker starting and stopping on an empty queue), which
another job on the machine hardly moves: ``worker_us_per_task``, the median of the repeats.
The ratios line compares the best rates, the median rates and the CPU per task.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROJECT = Path(__file__).resolve().parent / "django_tasks_project"
PG_SERVER = os.environ.get("STATOR_TEST_PG_PLAIN", "postgresql://postgres@127.0.0.1:5432")
IDLE_SECONDS = 10.0
SAVED = Path(__file__).resolve().parent / "results" / "django_tasks.jsonl"
REPORT = Path(__file__).resolve().parent / "RESULTS.md"
MARK_START, MARK_END = "<!-- django-tasks -->", "<!-- /django-tasks -->"


@contextmanager
def database(kind: str) -> Iterator[dict[str, str]]:
    """Environment variables naming a fresh database of ``kind``, removed afterwards."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield {"BENCH_SQLITE": str(Path(folder) / "bench.db")}
        return
    import psycopg

    name = f"stator_bench_{secrets.token_hex(4)}"
    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield {"BENCH_PG": f"{PG_SERVER}/{name}"}
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=PROJECT, env=env, capture_output=True, text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def step(env: dict[str, str], name: str, arg: int) -> dict[str, Any]:
    out = run(env, "benchsteps.py", name, str(arg))
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def worker_command(backend: str, idle: bool) -> list[str]:
    if backend == "stator":
        return ["manage.py", "runstator"] if idle else ["manage.py", "runstator", "--until-idle"]
    command = ["manage.py", "db_worker", "--no-startup-delay"]
    return command if idle else [*command, "--batch", "--interval", "0"]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_worker(env: dict[str, str], backend: str) -> tuple[float, float]:
    """One draining worker run to its end: (wall seconds, its CPU seconds, user + system)."""
    started = time.perf_counter()
    worker = subprocess.Popen(
        [sys.executable, *worker_command(backend, idle=False)], cwd=PROJECT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    assert worker.stderr is not None
    errors = worker.stderr.read()
    _, status, usage = os.wait4(worker.pid, 0)
    worker.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if worker.returncode != 0:
        raise SystemExit(f"error: the {backend} worker failed:\n{errors[-3000:].decode()}")
    return wall, usage.ru_utime + usage.ru_stime


def bench_env(db_env: dict[str, str], backend: str, conn_max_age: str) -> dict[str, str]:
    return {**os.environ, **db_env, "BENCH_BACKEND": backend,
            "BENCH_CONN_MAX_AGE": conn_max_age,
            "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{PROJECT}"}


def start_stop_cpu(kind: str, backend: str, conn_max_age: str) -> float:
    """The CPU seconds of a draining worker that finds nothing to do: its start and stop,
    taken off each drain's CPU so that what is left is the tasks'."""
    with database(kind) as db_env:
        env = bench_env(db_env, backend, conn_max_age)
        run(env, "manage.py", "migrate", "-v", "0")
        return min(run_worker(env, backend)[1] for _ in range(2))


def drain_once(
    kind: str, backend: str, conn_max_age: str, tasks: int, samples: int
) -> dict[str, Any]:
    with database(kind) as db_env:
        env = bench_env(db_env, backend, conn_max_age)
        run(env, "manage.py", "migrate", "-v", "0")
        enqueued = step(env, "enqueue", tasks)
        wall, cpu = run_worker(env, backend)
        drained = step(env, "drained", 0)
        row: dict[str, Any] = {
            "enqueue_per_s": round(enqueued["per_second"]),
            "drain_per_s": round(drained["per_second"]), "drained": drained["finished"],
            "worker_wall_s": round(wall, 2), "worker_cpu_s": cpu,
        }
        if samples:
            row.update(latency(env, backend, samples))
        return row


def latency(env: dict[str, str], backend: str, samples: int) -> dict[str, Any]:
    """An idle worker's CPU, then the pickup latency of tasks enqueued one at a time."""
    row: dict[str, Any] = {}
    worker = subprocess.Popen(
        [sys.executable, *worker_command(backend, idle=True)], cwd=PROJECT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(3.0)  # started and idle
        before = cpu_seconds(worker.pid)
        time.sleep(IDLE_SECONDS)
        row["idle_cpu_pct"] = round(100 * (cpu_seconds(worker.pid) - before) / IDLE_SECONDS, 2)
        picked = step(env, "trickle", samples)
        row["pickup_p50_ms"] = round(picked["p50_ms"], 1)
        row["pickup_p95_ms"] = round(picked["p95_ms"], 1)
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    return row


def measure(
    kind: str, backend: str, conn_max_age: str, tasks: int, samples: int, repeats: int = 1
) -> dict[str, Any]:
    """``repeats`` drains of ``tasks`` (the pickup latency after the last): the best and the
    median rate, and the worker's CPU per task (median), its start and stop taken off."""
    import statistics

    base = start_stop_cpu(kind, backend, conn_max_age)
    runs = [drain_once(kind, backend, conn_max_age, tasks, samples if i == repeats - 1 else 0)
            for i in range(repeats)]
    rates = [r["drain_per_s"] for r in runs]
    per_task = [1e6 * max(r["worker_cpu_s"] - base, 0.0) / r["drained"] for r in runs]
    last = runs[-1]
    row: dict[str, Any] = {
        "database": kind, "backend": backend, "conn_max_age": conn_max_age, "tasks": tasks,
        "enqueue_per_s": max(r["enqueue_per_s"] for r in runs),
        "drain_per_s": max(rates), "drain_median_per_s": round(statistics.median(rates)),
        "drain_runs": rates, "drained": last["drained"],
        "worker_wall_s": last["worker_wall_s"],
        "worker_us_per_task": round(statistics.median(per_task), 1),
        "worker_us_runs": [round(us, 1) for us in per_task],
        "start_stop_cpu_s": round(base, 3),
    }
    row.update({k: last[k] for k in ("idle_cpu_pct", "pickup_p50_ms", "pickup_p95_ms")
                if k in last})
    return row


def startup_round(kind: str, backend: str) -> tuple[float, float, float]:
    """(seconds from starting a worker to its first task running, the worker's CPU seconds by
    then (less sensitive to the machine's load), from SIGTERM to exit)."""
    import signal

    with database(kind) as db_env, tempfile.TemporaryDirectory() as folder:
        env = bench_env(db_env, backend, "0" if backend == "stator" else "none")
        run(env, "manage.py", "migrate", "-v", "0")
        marker = Path(folder) / "started"
        run(env, "manage.py", "shell", "-c",
            f"from benchjobs import stamp; stamp.enqueue({str(marker)!r})")
        began = time.time()
        worker = subprocess.Popen(
            [sys.executable, *worker_command(backend, idle=True)], cwd=PROJECT, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            while not marker.exists() or len(marker.read_text().split()) < 2:
                time.sleep(0.002)
            stamped, cpu = (float(x) for x in marker.read_text().split())
            first = stamped - began
            time.sleep(1.5)  # the task finished, the worker idle
            asked = time.monotonic()
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
            return first, cpu, time.monotonic() - asked
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def compiled_sources() -> None:
    """Stator's sources (and the project's) compiled to ``__pycache__`` first, as pip compiles
    an installed package's (the reference's are): with ``PYTHONDONTWRITEBYTECODE`` set, an
    editable checkout's modules were compiled from source at every start, about 0.03-0.06 s
    of Stator's start-up that no installed worker pays."""
    import compileall

    for folder in (ROOT / "src" / "stator", PROJECT):
        compileall.compile_dir(folder, quiet=1)


def startup(kinds: list[str], rounds: int) -> None:
    import statistics

    compiled_sources()
    for kind in kinds:
        seen: dict[str, list[tuple[float, float, float]]] = {"stator": [], "reference": []}
        for _ in range(rounds):
            for backend in seen:
                seen[backend].append(startup_round(kind, backend))
        for backend, times in seen.items():
            first = statistics.median(t[0] for t in times)
            cpu = statistics.median(t[1] for t in times)
            exit_ = statistics.median(t[2] for t in times)
            print(f"{kind} {backend}: start to first task running {first:.3f} s "
                  f"(all: {', '.join(f'{t[0]:.2f}' for t in times)}), worker CPU by then "
                  f"{cpu:.3f} s (all: {', '.join(f'{t[1]:.2f}' for t in times)}); SIGTERM to "
                  f"exit {exit_:.3f} s (all: {', '.join(f'{t[2]:.2f}' for t in times)})",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--tasks", type=int, default=None,
                        help="tasks per drain for both backends (else the two below)")
    parser.add_argument("--stator-tasks", type=int, default=20000)
    parser.add_argument("--reference-tasks", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3,
                        help="drains per backend, each on a fresh database")
    parser.add_argument("--latency-samples", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--startup", type=int, default=0, metavar="ROUNDS",
                        help="measure start-up and SIGTERM-to-exit instead (see above)")
    parser.add_argument("--write", action="store_true",
                        help=f"save the rows to {SAVED} and the section in {REPORT}")
    parser.add_argument("--from-saved", action="store_true",
                        help=f"only rewrite the section of {REPORT} from {SAVED}")
    args = parser.parse_args()
    if args.from_saved:
        rows = [json.loads(line) for line in SAVED.read_text().splitlines() if line.strip()]
        write_section(rows)
        return
    if args.startup:
        startup(args.db or ["sqlite", "postgresql"], args.startup)
        return
    rows = []
    for kind in args.db or ["sqlite", "postgresql"]:
        for backend, age in (("stator", "0"), ("reference", "none"), ("reference", "0")):
            tasks = args.tasks or (
                args.stator_tasks if backend == "stator" else args.reference_tasks)
            row = measure(kind, backend, age, tasks, args.latency_samples, args.repeats)
            rows.append(row)
            print(json.dumps(row) if args.json else _line(row), flush=True)
        print("; ".join(ratios([r for r in rows if r["database"] == kind])), flush=True)
    if args.write:
        SAVED.write_text("".join(json.dumps(r) + "\n" for r in rows))
        write_section(rows)


def ratios(rows: list[dict[str, Any]]) -> list[str]:
    """Stator against the reference's best, per database: best rates, median rates (where
    measured) and worker CPU per task (where measured)."""
    out = []
    for kind in sorted({r["database"] for r in rows}):
        ours = [r for r in rows if r["database"] == kind and r["backend"] == "stator"]
        theirs = [r for r in rows if r["database"] == kind and r["backend"] == "reference"]
        if not (ours and theirs):
            continue
        parts = [f"{_best(ours, 'drain_per_s') / _best(theirs, 'drain_per_s'):.1f}x its best "
                 "drain rate"]
        if all("drain_median_per_s" in r for r in ours + theirs):
            median = _best(ours, "drain_median_per_s") / _best(theirs, "drain_median_per_s")
            parts.append(f"{median:.1f}x its best median rate")
        if all(r.get("worker_us_per_task") for r in ours + theirs):
            us = min(r["worker_us_per_task"] for r in ours)
            them = min(r["worker_us_per_task"] for r in theirs)
            parts.append(f"worker CPU {us:.0f} against {them:.0f} us per task ({them / us:.1f}x)")
        out.append(f"{kind}: {', '.join(parts)}")
    return out


def _best(rows: list[dict[str, Any]], key: str) -> float:
    return float(max(r[key] for r in rows))


def write_section(rows: list[dict[str, Any]]) -> None:
    """Replace the Django tasks section of RESULTS.md (between its markers), or append it."""
    table = [
        "| database | backend | connections | tasks per drain | enqueue in one transaction "
        "(/s) | drain, one worker (tasks/s): best / median | worker CPU per task | pickup "
        "p50 / p95 (ms) | idle worker CPU |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        name = "Stator" if r["backend"] == "stator" else "django-tasks-db"
        age = "persistent" if r["conn_max_age"] == "none" else "CONN_MAX_AGE=0"
        pickup = f"{r.get('pickup_p50_ms', '-')} / {r.get('pickup_p95_ms', '-')}"
        median = r.get("drain_median_per_s")
        drain = f"{r['drain_per_s']:,}" + ("" if median is None else f" / {median:,}")
        cpu = r.get("worker_us_per_task")
        table.append(
            f"| {r['database']} | {name} | {age} | {r['tasks']:,} | {r['enqueue_per_s']:,} | "
            f"{drain} | {'-' if cpu is None else f'{cpu:g} µs'} | {pickup} | "
            f"{r.get('idle_cpu_pct', '-')}% |"
        )
    section = "\n".join([
        MARK_START, "## Django tasks (`django.tasks` backends)", "",
        "`python benchmarks/django_tasks.py --write` (no-op tasks; each drain on a fresh "
        "database, repeated; one worker process with Django's default settings; see the "
        "script's docstring). Stator against the reference database backend "
        "(`django-tasks-db`, `manage.py db_worker`) in the same run. Drain = finished tasks / "
        "(last finish - first start); worker CPU per task = the draining worker's user + "
        "system CPU, less its start and stop on an empty queue, per task (median of the "
        "repeats).", "", *table, "",
        "Stator / reference: " + "; ".join(ratios(rows)) + ".", MARK_END, "",
    ])
    text = REPORT.read_text() if REPORT.exists() else ""
    if MARK_START in text:
        before, rest = text.split(MARK_START, 1)
        after = rest.split(MARK_END, 1)[1].lstrip("\n")
        text = before + section + "\n" + after
    else:
        text = text.rstrip("\n") + "\n\n" + section
    REPORT.write_text(text)


def _line(row: dict[str, Any]) -> str:
    return " | ".join(f"{k}={v}" for k, v in row.items())


if __name__ == "__main__":
    main()
