"""The bench's minimal loop (stator._bench._minimal) run by N processes at once on one table.
MINIMAL_ANY=1: its claim's UPDATE finds the picked rows by ``id = ANY(ARRAY(SELECT …))``
instead of ``id IN (SELECT …)`` (the planner's sequential scan otherwise: RESULTS.md, 2026-11-27
evening)."""
import multiprocessing as mp, os, sys, time
import psycopg
from stator._bench import _minimal as m

DSN = "host=127.0.0.1 user=postgres dbname=scale2_min"

def cpu_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")

class AnyCursor:
    def __init__(self, cursor): self._c = cursor
    def execute(self, sql, params=None):
        if sql.lstrip().startswith("UPDATE") and " IN (SELECT id FROM " in sql:
            sql = sql.replace(" IN (SELECT id FROM ", " = ANY(ARRAY(SELECT id FROM ", 1).replace(
                "FOR UPDATE SKIP LOCKED) ", "FOR UPDATE SKIP LOCKED)) ", 1)
        return self._c.execute(sql, params)
    def __getattr__(self, name): return getattr(self._c, name)

class AnyConn:
    def __init__(self, conn): self._conn = conn
    def cursor(self): return AnyCursor(self._conn.cursor())
    def __getattr__(self, name): return getattr(self._conn, name)

def child(q, go):
    conn = psycopg.connect(DSN, autocommit=True)
    if os.environ.get("MINIMAL_ANY"):
        conn = AnyConn(conn)
    bpid = conn.execute("select pg_backend_pid()").fetchone()[0]
    go.wait()
    c0 = cpu_of(bpid)
    t0 = time.perf_counter()
    stats = m._drive_postgres(conn, 100)
    q.put((stats.transitions, t0, time.perf_counter(), stats.cpu_seconds, cpu_of(bpid) - c0))

def run(n, rows):
    adm = psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True)
    adm.execute("DROP DATABASE IF EXISTS scale2_min WITH (FORCE)")
    adm.execute("CREATE DATABASE scale2_min")
    with psycopg.connect(DSN, autocommit=True) as conn:
        m._fill_postgres(conn, rows)
    q, go = mp.Queue(), mp.Event()
    ps = [mp.Process(target=child, args=(q, go)) for _ in range(n)]
    for p in ps: p.start()
    time.sleep(1.0)
    go.set()
    res = [q.get() for _ in ps]
    for p in ps: p.join()
    tr = sum(r[0] for r in res); secs = max(r[2] for r in res) - min(r[1] for r in res)
    wcpu = sum(r[3] for r in res); dcpu = sum(r[4] for r in res)
    print(f"minimal loop{' (ANY)' if os.environ.get('MINIMAL_ANY') else ''}, {n} process(es): {tr/secs:,.0f}/s, loop CPU {wcpu/tr*1e6:.1f} us, backend CPU {dcpu/tr*1e6:.1f} us per transition, load {os.getloadavg()[0]:.1f}", flush=True)

if __name__ == "__main__":
    rows = int(sys.argv[1])
    for n in [int(x) for x in sys.argv[2:]]:
        run(n, rows)
