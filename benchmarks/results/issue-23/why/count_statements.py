"""Count what one drain sends to PostgreSQL, per thread and per statement kind, client side
(psycopg's own send paths patched: every query a cursor sends (a first PREPARE counted apart), and every command psycopg
sends by itself: BEGIN, COMMIT, ROLLBACK, SET …).  pg_stat_statements is not loaded on this
server; pg_stat_database's xact_commit/xact_rollback for the drain's own database are read
too as a server-side cross-check.

    python count_statements.py engine ROWS [plain]   # the engine, as prof_drain.py runs it
    python count_statements.py loop ROWS             # limit.drive: the stator-sql serial loop

Works in its own database, ``why23_count``, made afresh each run.
"""

from __future__ import annotations

import collections
import re
import sys
import threading
import time

from psycopg import _connection_base, _cursor_base
from sqlalchemy import create_engine, text

from stator._bench._limit import drive
from stator._bench._models import BenchPlainRow, BenchRow
from stator._bench._places import insert_rows
from stator._stator import Stator

URL = "postgresql+psycopg://postgres@127.0.0.1:5432/"
DB = "why23_count"
counts: collections.Counter[tuple[str, str]] = collections.Counter()
lock = threading.Lock()
ON = False


def kind(sql: bytes | str) -> str:
    s = sql.decode() if isinstance(sql, bytes) else str(sql)
    s = re.sub(r"\s+", " ", s).strip()
    return s[:70]


def record(sql: bytes | str) -> None:
    if not ON:
        return
    name = re.sub(r"[-_]?\d+$", "", threading.current_thread().name)
    with lock:
        counts[(name, kind(sql))] += 1


orig_cmd = _connection_base.BaseConnection._exec_command
orig_send = _cursor_base.BaseCursor._maybe_prepare_gen


def exec_command(self, command, *a, **k):  # type: ignore[no-untyped-def]
    record(command if isinstance(command, (bytes, str)) else command.as_string(None))
    return orig_cmd(self, command, *a, **k)


def execute_send(self, query, *a, **k):  # type: ignore[no-untyped-def]
    prep, _name = self._get_prepared(query, k.get("prepare"))
    if prep is _cursor_base.Prepare.SHOULD:
        record(b"(PREPARE, own round trip) " + query.query)
    record(query.query)
    return orig_send(self, query, *a, **k)


_connection_base.BaseConnection._exec_command = exec_command  # type: ignore[method-assign]
_cursor_base.BaseCursor._maybe_prepare_gen = execute_send  # type: ignore[method-assign]


def xacts() -> tuple[int, int]:
    admin = create_engine(URL + "postgres")
    with admin.connect() as conn:
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        row = conn.execute(text(
            "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = :d"
        ), {"d": DB}).one()
    admin.dispose()
    return int(row[0]), int(row[1])


def main() -> None:
    global ON
    mode, rows = sys.argv[1], int(sys.argv[2])
    model = BenchPlainRow if sys.argv[3:] == ["plain"] else BenchRow
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
    time.sleep(1.5)  # let the statistics collector flush
    x0 = xacts()
    began = time.perf_counter()
    if mode == "engine":
        stator = Stator(url, [model], concurrency=4, batch_size=100)
        ON = True
        moved = stator.worker(until_idle=True, idle_window=0.0).run().transitions
        ON = False
        stator.dispose()
    else:
        engine = create_engine(url)
        ON = True
        moved = drive(engine, 100).transitions
        ON = False
        engine.dispose()
    seconds = time.perf_counter() - began
    time.sleep(1.5)
    x1 = xacts()
    total = sum(counts.values())
    print(f"mode={mode} model={model.__name__} transitions={moved} s={seconds:.2f} "
          f"round_trips={total} per_1000={total / moved * 1000:.1f}")
    print(f"server pg_stat_database: commits={x1[0] - x0[0]} rollbacks={x1[1] - x0[1]} "
          f"per_1000={(x1[0] - x0[0] + x1[1] - x0[1]) / moved * 1000:.1f}")
    for (thread, sql), n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"{n:7d} {n / moved * 1000:7.1f}/1000  {thread:24s} {sql}")


if __name__ == "__main__":
    main()
