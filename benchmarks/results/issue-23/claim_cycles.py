# Inputs: sql-old.json and sql-new.json, {"claim": ..., "write": ...} of BenchPlainRow as each checkout
# builds them (TrackedModel.sql). Usage: python claim_cycles.py BLOCKS CLAIMS_PER_BLOCK
"""Claim + fenced write-back cycles, one connection each, the claim's backend CPU per claimed row,
old and new claim statements alternating in blocks on one steady-state table."""
import json, os, re, sys, time
from datetime import datetime, timedelta, UTC
import psycopg
DB = "scale2_cyc"
adm = psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True)
adm.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"); adm.execute(f"CREATE DATABASE {DB}")
T = "stator_bench_plain_rows"
c1 = psycopg.connect(f"host=127.0.0.1 user=postgres dbname={DB}", autocommit=True)
c1.execute(f"CREATE TABLE {T} (id integer PRIMARY KEY, state varchar(100) NOT NULL, state_changed timestamptz NOT NULL, state_next timestamptz, state_attempts integer NOT NULL DEFAULT 0)")
c1.execute(f"CREATE INDEX ix_due ON {T} (state, state_next) WHERE state_next IS NOT NULL")
c1.execute("CREATE TABLE stator_paused (model text PRIMARY KEY)")
c1.execute(f"INSERT INTO {T} SELECT g, (array['first','second','third'])[1 + g % 3], now(), now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, 20000) g")
c1.execute(f"VACUUM ANALYZE {T}")
c2 = psycopg.connect(f"host=127.0.0.1 user=postgres dbname={DB}", autocommit=True)
def pg(sql): return re.sub(r"(?<!:):([a-z_0-9]+)", lambda m: "%(" + m.group(1) + ")s", sql)
claims = {k: pg(json.load(open(f"sql-{k}.json"))["claim"]) for k in ("old", "new")}
write = (f"UPDATE {T} SET state = v.state, state_changed = v.changed, state_next = v.next FROM unnest(CAST(%(ids)s AS integer[]), "
         f"CAST(%(st)s AS text[]), CAST(%(fe)s AS timestamptz[]), CAST(%(ch)s AS timestamptz[]), CAST(%(nx)s AS timestamptz[])) AS v(id, state, fence, changed, next) "
         f"WHERE {T}.id = v.id AND {T}.state_next = v.fence")
NXT = {"first": "second", "second": "third", "third": "first"}  # a cycle: the table stays steady
def pid(c): return c.execute("select pg_backend_pid()").fetchone()[0]
def cpu(p):
    with open(f"/proc/{p}/stat") as f: x = f.read().rsplit(")", 1)[1].split()
    return (int(x[11]) + int(x[12])) / os.sysconf("SC_CLK_TCK")
p1, p2 = pid(c1), pid(c2)
res = {"old": [], "new": []}
blocks, per = int(sys.argv[1]), int(sys.argv[2])
for b in range(blocks):
    for kind in (("old", "new") if b % 2 == 0 else ("new", "old")):
        sql = claims[kind]; rows = 0; a0, w0 = cpu(p1), cpu(p2)
        for _ in range(per):
            now = datetime.now(UTC); lease = now + timedelta(seconds=60)
            got = c1.execute(sql, {"now": now, "limit": 100, "lease_0": lease, "lease_1": lease, "lease_2": lease}, prepare=True).fetchall()
            rows += len(got)
            c2.execute(write, {"ids": [r[0] for r in got], "st": [NXT[r[1]] for r in got], "fe": [r[3] for r in got],
                               "ch": [now] * len(got), "nx": [now] * len(got)}, prepare=True)
        a1, w1 = cpu(p1), cpu(p2)
        res[kind].append(((a1 - a0) / rows * 1e6, (w1 - w0) / rows * 1e6))
        print(f"{kind}: {rows/per:.0f} rows per claim, claim backend CPU {res[kind][-1][0]:.1f} us per row, write backend {res[kind][-1][1]:.1f} us, load {os.getloadavg()[0]:.1f}", flush=True)
for k, v in res.items():
    cl = sorted(x[0] for x in v); wr = sorted(x[1] for x in v)
    print(k, "claim us/row median", cl[len(cl)//2], "all", [round(x, 1) for x in cl], "write median", wr[len(wr)//2])
