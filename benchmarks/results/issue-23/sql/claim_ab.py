"""Claim variants A/B on one steady-state cyclic table; claim backend CPU per claimed row.
python claim_ab.py BLOCKS PER"""
import os, re, sys
from datetime import UTC, datetime, timedelta
import psycopg
from sqlalchemy import create_engine
from stator._bench._models import BenchPlainRow
from stator._store import Store
from stator._store._dialects._postgres import PostgresDialect

DB = "hsql_claimab"
adm = psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True)
adm.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"); adm.execute(f"CREATE DATABASE {DB}")
T = "stator_bench_plain_rows"
c1 = psycopg.connect(f"host=127.0.0.1 user=postgres dbname={DB}", autocommit=True)
c1.execute("CREATE TABLE stator_paused (model text PRIMARY KEY)")
c1.execute(f"CREATE TABLE {T} (id integer PRIMARY KEY, state text NOT NULL, state_changed timestamptz NOT NULL, state_next timestamptz, state_attempts integer NOT NULL DEFAULT 0)")
c1.execute(f"CREATE INDEX ix_due ON {T} (state, state_next) WHERE state_next IS NOT NULL")
c1.execute(f"INSERT INTO {T} SELECT g, (ARRAY['first','second','third'])[1 + g % 3], now(), now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, 20000) g")
c1.execute(f"VACUUM ANALYZE {T}")
c2 = psycopg.connect(f"host=127.0.0.1 user=postgres dbname={DB}", autocommit=True)
e = create_engine("postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
import json, subprocess
def claim_sql(tree, *attrs):
    out = subprocess.run([f"/work/wt/{tree}/.venv/bin/python", os.path.join(os.path.dirname(os.path.abspath(__file__)), "getsql.py"), *attrs], capture_output=True, text=True, check=True).stdout
    return json.loads(out)
def pg(sql): return re.sub(r"(?<!:):([a-z_0-9]+)", lambda m: "%(" + m.group(1) + ")s", sql)
variants = {"base": claim_sql("h-sql-base"), "new": claim_sql("h-sql"),
            "base_rank": claim_sql("h-sql-base", "rank_in_branches=1"), "new_rank": claim_sql("h-sql", "rank_in_branches=1")}
extra = os.environ.get("VARIANTS")
if extra:
    variants = {k: v for k, v in variants.items() if k in extra.split(",")}
sqls = {k: pg(v) for k, v in variants.items()}
write = (f"UPDATE {T} SET state = v.state, state_changed = v.changed, state_next = v.next FROM unnest(%(ids)s::integer[], "
         f"%(st)s::text[], %(fe)s::timestamptz[], %(ch)s::timestamptz[], %(nx)s::timestamptz[]) AS v(id, state, fence, changed, next) "
         f"WHERE {T}.id = v.id AND {T}.state_next = v.fence")
NXT = {"first": "second", "second": "third", "third": "first"}
def pid(c): return c.execute("select pg_backend_pid()").fetchone()[0]
def cpu(p):
    with open(f"/proc/{p}/stat") as f: x = f.read().rsplit(")", 1)[1].split()
    return (int(x[11]) + int(x[12])) / os.sysconf("SC_CLK_TCK")
p1, p2 = pid(c1), pid(c2)
res = {k: [] for k in sqls}
walls = {k: [] for k in sqls}
import time, statistics
blocks, per = int(sys.argv[1]), int(sys.argv[2])
names = list(sqls)
for b in range(blocks):
    order = names if b % 2 == 0 else names[::-1]
    for kind in order:
        sql = sqls[kind]; rows = 0; a0 = cpu(p1)
        for _ in range(per):
            now = datetime.now(UTC); lease = now + timedelta(seconds=60)
            t0 = time.perf_counter()
            got = c1.execute(sql, {"now": now, "limit": 100, "lease_0": lease, "lease_1": lease, "lease_2": lease}, prepare=True).fetchall()
            walls[kind].append(time.perf_counter() - t0)
            rows += len(got)
            c2.execute(write, {"ids": [r[0] for r in got], "st": [NXT[r[1]] for r in got], "fe": [r[3] for r in got],
                               "ch": [now] * len(got), "nx": [now] * len(got)}, prepare=True)
        a1 = cpu(p1)
        res[kind].append((a1 - a0) / rows * 1e6)
for k, v in res.items():
    cl = sorted(v)
    w = sorted(walls[k][20:])
    print(f"{k:20s} wall ms/claim median {statistics.median(w)*1e3:.3f} p25 {w[len(w)//4]*1e3:.3f} | claim us/row median {cl[len(cl)//2]:.2f} mean {sum(cl)/len(cl):.2f} all {[round(x, 1) for x in cl]}")
print("load", os.getloadavg())
adm.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
