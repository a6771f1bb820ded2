"""One drain, its CPU split by thread (this process, /proc/self/task) and by server backend
(/proc/PID of each backend of the drain's database, named by the last statement it ran).

    python cpu_split.py engine ROWS [plain] [CONCURRENCY] [BATCH]
    python cpu_split.py loop ROWS [BATCH]     # limit.drive: Stator's statements, serial loop

With WHY_SET="name=value" in the environment, each of the drain's connections runs
``SET name = value`` when it connects (a session setting of our own connections, e.g.
plan_cache_mode=force_generic_plan; the server's configuration is not touched).

Both figures in microseconds per transition.  A sampler thread (every 20 ms) keeps each
thread's and backend's last reading; its own CPU is printed apart.  Works in its own
database, ``why23_cpu``, made afresh each run.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time

from sqlalchemy import create_engine, event, text

from stator._bench._limit import drive
from stator._bench._models import BenchPlainRow, BenchRow
from stator._bench._places import insert_rows
from stator._stator import Stator

URL = "postgresql+psycopg://postgres@127.0.0.1:5432/"
DB = "why23_cpu"
TICK = os.sysconf("SC_CLK_TCK")


def stat_cpu(path: str) -> float | None:
    try:
        fields = open(path).read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


class Sampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="sampler", daemon=True)
        self.stop = threading.Event()
        self.threads: dict[int, tuple[str, float, float]] = {}  # tid: (name, first, last)
        self.backends: dict[int, list] = {}  # pid: [label, first, last]
        self.monitor = create_engine(URL + "postgres", isolation_level="AUTOCOMMIT")

    def run(self) -> None:
        with self.monitor.connect() as conn:
            while not self.stop.is_set():
                self.sample(conn)
                time.sleep(0.02)
            self.sample(conn)

    def sample(self, conn) -> None:  # type: ignore[no-untyped-def]
        names = {t.native_id: t.name for t in threading.enumerate()}
        for tid in os.listdir("/proc/self/task"):
            cpu = stat_cpu(f"/proc/self/task/{tid}/stat")
            if cpu is None:
                continue
            name = re.sub(r"[-_]?\d+$", "", names.get(int(tid), f"tid{tid}"))
            old = self.threads.get(int(tid))
            self.threads[int(tid)] = (name, old[1] if old else cpu, cpu)
        rows = conn.execute(text(
            "SELECT pid, query FROM pg_stat_activity WHERE datname = :d"), {"d": DB}).all()
        for pid, query in rows:
            cpu = stat_cpu(f"/proc/{pid}/stat")
            if cpu is None:
                continue
            q = re.sub(r"\s+", " ", query or "")
            label = ("claim" if "claim_share" in q else "write" if q.startswith(("UPDATE", "WITH changed"))
                     else "listen" if "LISTEN" in q or "notify" in q else q[:30])
            old = self.backends.get(pid)
            if old is None:
                self.backends[pid] = [label, cpu, cpu]  # first seen: its start-up is left out
            else:
                if label in ("claim", "write", "listen") or old[0] not in ("claim", "write"):
                    old[0] = label if old[0] in ("", label) or label in ("claim", "write") else old[0]
                old[2] = cpu


def session_set(engine) -> None:  # type: ignore[no-untyped-def]
    setting = os.environ.get("WHY_SET")
    if not setting:
        return
    name, value = setting.split("=", 1)

    @event.listens_for(engine, "connect")
    def _set(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        autocommit = dbapi_conn.autocommit
        dbapi_conn.autocommit = True
        dbapi_conn.execute(f"SET {name} = {value}")
        dbapi_conn.autocommit = autocommit


def main() -> None:
    mode, rows = sys.argv[1], int(sys.argv[2])
    rest = sys.argv[3:]
    plain = bool(rest) and rest[0] == "plain"
    if plain:
        rest = rest[1:]
    model = BenchPlainRow if plain else BenchRow
    admin = create_engine(URL + "postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {DB}"))
        conn.execute(text(f"CREATE DATABASE {DB}"))
    admin.dispose()
    url = URL + DB
    setup = Stator(url, [model])
    setup.migrate()
    insert_rows(setup.engine, model.__tablename__, 1, rows)
    setup.dispose()
    sampler = Sampler()
    if mode == "engine":
        conc = int(rest[0]) if rest else 4
        batch = int(rest[1]) if len(rest) > 1 else 100
        stator = Stator(url, [model], concurrency=conc, batch_size=batch)
        session_set(stator.engine)
        with stator.engine.connect():
            pass
        worker = stator.worker(until_idle=True, idle_window=0.0)
        sampler.start()
        time.sleep(0.1)
        began = time.perf_counter()
        moved = worker.run().transitions
    else:
        batch = int(rest[0]) if rest else 100
        engine = create_engine(url)
        session_set(engine)
        with engine.connect():
            pass
        sampler.start()
        time.sleep(0.1)
        began = time.perf_counter()
        moved = drive(engine, batch).transitions
    seconds = time.perf_counter() - began
    time.sleep(0.05)
    sampler.stop.set()
    sampler.join()
    load = os.getloadavg()[0]
    print(f"mode={mode} model={model.__name__} args={rest} transitions={moved} s={seconds:.2f} "
          f"tps={moved / seconds:.0f} load_1m={load:.2f} set={os.environ.get('WHY_SET', '')}")
    per: dict[str, float] = {}
    for name, first, last in sampler.threads.values():
        per[name] = per.get(name, 0.0) + last - first
    client = sum(v for k, v in per.items() if k != "sampler")
    print(f"client CPU us/transition (sampler left out): {client / moved * 1e6:.1f}")
    for name, cpu in sorted(per.items(), key=lambda kv: -kv[1]):
        print(f"  {cpu / moved * 1e6:7.1f}  thread {name}")
    server = sum(b[2] - b[1] for b in sampler.backends.values())
    print(f"server CPU us/transition (this database's backends): {server / moved * 1e6:.1f}")
    for pid, (label, first, last) in sampler.backends.items():
        print(f"  {(last - first) / moved * 1e6:7.1f}  backend {pid} {label}")


if __name__ == "__main__":
    main()
