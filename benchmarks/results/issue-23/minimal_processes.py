"""The bench's minimal loop (stator._bench._minimal) run by N processes at once on one table."""
import multiprocessing as mp, os, sys, time
import psycopg
from stator._bench import _minimal as m

DSN = "host=127.0.0.1 user=postgres dbname=scale2_min"

def cpu_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")

def child(q, go):
    conn = psycopg.connect(DSN, autocommit=True)
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
    print(f"minimal loop, {n} process(es): {tr/secs:,.0f}/s, loop CPU {wcpu/tr*1e6:.1f} us, backend CPU {dcpu/tr*1e6:.1f} us per transition, load {os.getloadavg()[0]:.1f}", flush=True)

if __name__ == "__main__":
    rows = int(sys.argv[1])
    for n in [int(x) for x in sys.argv[2:]]:
        run(n, rows)
