"""Usage: python drain_claims.py ROUNDS ROWS.  Fresh bench-shaped table per drain; claims (variant) + simple fenced writes until nothing is due;
backend CPU of the claim connection and of the write connection per transition. Variants alternate."""
import os, re, sys, time
from datetime import datetime, timedelta, UTC
import psycopg
DB = "s2_drain"
adm = psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True)
adm.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"); adm.execute(f"CREATE DATABASE {DB}")
T = "stator_bench_plain_rows"
def pg(sql): return re.sub(r"(?<!:):([a-z_0-9]+)", lambda m: "%(" + m.group(1) + ")s", sql)
def claim_sql():
    """BenchPlainRow's claim as the checkout first on PYTHONPATH builds it."""
    from stator import Stator
    from stator._bench._models import BenchPlainRow
    stator = Stator(f"postgresql+psycopg://postgres@127.0.0.1:5432/{DB}", [BenchPlainRow])
    sql = stator.store.tracked[0].sql.claim
    stator.dispose()
    return sql
base = claim_sql()
IN, ANY = "WHERE id IN (SELECT id FROM picked)", "WHERE id = ANY(ARRAY(SELECT id FROM picked))"
V = {"in": base.replace(ANY, IN), "any": base.replace(IN, ANY)}  # either checkout: both spellings
assert V["in"] != V["any"]
write = (f"UPDATE {T} SET state = v.state, state_changed = v.changed, state_next = v.next FROM unnest(CAST(%(ids)s AS integer[]), "
         f"CAST(%(st)s AS text[]), CAST(%(fe)s AS timestamptz[]), CAST(%(ch)s AS timestamptz[]), CAST(%(nx)s AS timestamptz[])) AS v(id, state, fence, changed, next) "
         f"WHERE {T}.id = v.id AND {T}.state_next = v.fence")
NXT = {"first": "second", "second": "third", "third": "done"}
def cpu(p):
    with open(f"/proc/{p}/stat") as f: x = f.read().rsplit(")", 1)[1].split()
    return (int(x[11]) + int(x[12])) / os.sysconf("SC_CLK_TCK")
res = {k: [] for k in V}
rounds = int(sys.argv[1]); rows = int(sys.argv[2])
for r in range(rounds):
    for kind in (list(V) if r % 2 == 0 else list(V)[::-1]):
        c1 = psycopg.connect(f"host=127.0.0.1 user=postgres dbname={DB}", autocommit=True)
        c1.execute(f"DROP TABLE IF EXISTS {T}; DROP TABLE IF EXISTS stator_paused")
        c1.execute(f"CREATE TABLE {T} (id serial PRIMARY KEY, state varchar(100) NOT NULL, state_changed timestamptz NOT NULL, state_next timestamptz, state_attempts integer NOT NULL DEFAULT 0)")
        c1.execute(f"CREATE INDEX ix_due ON {T} (state, state_next) WHERE state_next IS NOT NULL")
        c1.execute("CREATE TABLE stator_paused (model text PRIMARY KEY)")
        c1.execute(f"INSERT INTO {T} (state, state_changed, state_next) SELECT 'first', now(), now() - interval '1 hour' FROM generate_series(1, {rows}) g")
        c1.execute(f"VACUUM ANALYZE {T}")
        c2 = psycopg.connect(f"host=127.0.0.1 user=postgres dbname={DB}", autocommit=True)
        p1 = c1.execute("select pg_backend_pid()").fetchone()[0]; p2 = c2.execute("select pg_backend_pid()").fetchone()[0]
        sql = pg(V[kind]); n = 0; a0, w0 = cpu(p1), cpu(p2); t0 = time.perf_counter()
        while True:
            now = datetime.now(UTC); lease = now + timedelta(seconds=60)
            got = c1.execute(sql, {"now": now, "limit": 100, "lease_0": lease, "lease_1": lease, "lease_2": lease}).fetchall()
            if not got: break
            n += len(got)
            c2.execute(write, {"ids": [x[0] for x in got], "st": [NXT[x[1]] for x in got], "fe": [x[3] for x in got],
                               "ch": [now] * len(got), "nx": [None if NXT[x[1]] == "done" else now for x in got]})
        a1, w1 = cpu(p1), cpu(p2); secs = time.perf_counter() - t0
        res[kind].append(((a1 - a0) / n * 1e6, (w1 - w0) / n * 1e6))
        print(f"{kind}: {n} transitions in {secs:.1f}s, claim backend {res[kind][-1][0]:.1f} us/transition, write backend {res[kind][-1][1]:.1f}, load {os.getloadavg()[0]:.1f}", flush=True)
        c1.close(); c2.close()
for k, v in res.items():
    cl = sorted(x[0] for x in v); wr = sorted(x[1] for x in v)
    print(k, "claim median", round(cl[len(cl)//2], 1), [round(x, 1) for x in cl], "write median", round(wr[len(wr)//2], 1))
