"""Claim statements of two checkouts (/work/wt/h-sql-base = base, /work/wt/h-sql = new,
each with its .venv; getsql.py prints one's claim), compared on one table.  See RESULTS.md,
2026-11-27 late evening."""
import json, os, re, statistics, subprocess, sys
from datetime import UTC, datetime, timedelta
import psycopg
DB = "hsql_explainab"
adm = psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True)
adm.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"); adm.execute(f"CREATE DATABASE {DB}")
T = "stator_bench_plain_rows"
c = psycopg.connect(f"host=127.0.0.1 user=postgres dbname={DB}", autocommit=True)
c.execute("CREATE TABLE stator_paused (model text PRIMARY KEY)")
c.execute(f"CREATE TABLE {T} (id integer PRIMARY KEY, state text NOT NULL, state_changed timestamptz NOT NULL, state_next timestamptz, state_attempts integer NOT NULL DEFAULT 0)")
c.execute(f"CREATE INDEX ix_due ON {T} (state, state_next) WHERE state_next IS NOT NULL")
mode = sys.argv[2] if len(sys.argv) > 2 else "even"
if mode == "even":
    c.execute(f"INSERT INTO {T} SELECT g, (ARRAY['first','second','third'])[1 + g % 3], now(), now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, 20000) g")
else:  # one state short: 'third' has 10 due rows
    c.execute(f"INSERT INTO {T} SELECT g, CASE WHEN g <= 10 THEN 'third' ELSE (ARRAY['first','second'])[1 + g % 2] END, now(), now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, 20000) g")
c.execute(f"VACUUM ANALYZE {T}")
if os.environ.get("CHURN"): c.execute(f"UPDATE {T} SET state_changed = now()")
def claim_sql(tree, *attrs):
    return json.loads(subprocess.run([f"/work/wt/{tree}/.venv/bin/python", os.path.join(os.path.dirname(os.path.abspath(__file__)), "getsql.py"), *attrs], capture_output=True, text=True, check=True).stdout)
def pg(sql): return re.sub(r"(?<!:):([a-z_0-9]+)", lambda m: "%(" + m.group(1) + ")s", sql)
variants = {"base": claim_sql("h-sql-base"), "new": claim_sql("h-sql"), "base_rank": claim_sql("h-sql-base", "rank_in_branches=1")}
res = {k: [] for k in variants}
c.autocommit = False
c.execute("SET plan_cache_mode = force_generic_plan")
for i in range(int(sys.argv[1])):
    for k, sql in (variants.items() if i % 2 == 0 else reversed(list(variants.items()))):
        now = datetime.now(UTC); lease = now + timedelta(seconds=60)
        rows = c.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + pg(sql), {"now": now, "limit": 100, "lease_0": lease, "lease_1": lease, "lease_2": lease}).fetchone()[0]
        res[k].append(rows[0]["Execution Time"])
        c.rollback()
        c.execute("SET plan_cache_mode = force_generic_plan")
for k, v in res.items():
    v = sorted(v[2:])
    print(f"{mode} {k:10s} execution ms median {statistics.median(v):.3f} p25 {v[len(v)//4]:.3f} mean {statistics.fmean(v):.3f}")
print("load", os.getloadavg()[0])
c.close(); adm.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
