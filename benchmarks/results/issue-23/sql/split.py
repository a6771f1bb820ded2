"""Serial claim + engine write_all on one backend; server CPU per transition for claim and
write apart, and client thread CPU of write_all.  python split.py ROWS TAG"""
import os, sys, time
from datetime import UTC, datetime
from sqlalchemy import create_engine, text
from stator._bench._models import NEXT_STATE, BenchPlainRow
from stator._bench._places import insert_rows
from stator._stator import Stator
from stator._store import Store
from stator._policy import Write

URL = "postgresql+psycopg://postgres@127.0.0.1:5432/"
TICK = os.sysconf("SC_CLK_TCK")
def backend_cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK
rows, tag = int(sys.argv[1]), sys.argv[2]
DB = f"hsql_{tag}"
admin = create_engine(URL + "postgres", isolation_level="AUTOCOMMIT")
with admin.connect() as c:
    c.execute(text(f"DROP DATABASE IF EXISTS {DB}")); c.execute(text(f"CREATE DATABASE {DB}"))
setup = Stator(URL + DB, [BenchPlainRow]); setup.migrate()
insert_rows(setup.engine, BenchPlainRow.__tablename__, 1, rows); setup.dispose()
engine = create_engine(URL + DB, pool_size=1, max_overflow=0)
store = Store(engine, [BenchPlainRow]); tracked = store.tracked[0]
with engine.connect() as c:
    pid = c.execute(text("SELECT pg_backend_pid()")).scalar()
    c.execute(text(f"VACUUM ANALYZE {tracked.quoted_table}")) if False else None
claim_cpu = write_cpu = wclient = 0.0; moved = 0
began = time.perf_counter()
while True:
    now = datetime.now(UTC)
    c0 = backend_cpu(pid)
    claimed = store.claim(tracked, now, 100)
    c1 = backend_cpu(pid); claim_cpu += c1 - c0
    if not claimed: break
    now = datetime.now(UTC)
    writes = []
    for _, cl in claimed:
        nxt = NEXT_STATE[cl.state]
        writes.append(Write(cl.pk, cl.state, cl.lease_until, state=nxt, state_changed=now,
                            state_next=None if nxt == "done" else now, attempts=0, moved=True))
    t0 = time.thread_time()
    lost = store.write_all([(tracked, writes)])
    wclient += time.thread_time() - t0
    write_cpu += backend_cpu(pid) - c1
    assert not lost.get(tracked.name), lost
    moved += len(writes)
s = time.perf_counter() - began
engine.dispose()
with admin.connect() as c: c.execute(text(f"DROP DATABASE IF EXISTS {DB}"))
print(f"{tag}: transitions={moved} tps={moved/s:.0f} load={os.getloadavg()[0]:.2f} server claim {claim_cpu/moved*1e6:.1f} write {write_cpu/moved*1e6:.1f} total {(claim_cpu+write_cpu)/moved*1e6:.1f} us; client write_all {wclient/moved*1e6:.1f} us")
