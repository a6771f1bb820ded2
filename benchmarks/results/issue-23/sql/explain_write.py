"""The write-back's plan (EXPLAIN ANALYZE, generic plan) with binary times; own database."""
import os, re, statistics, sys
from datetime import UTC, datetime, timedelta
import psycopg
from stator._store._dialects._postgres import TimeArray, binary_times, array_literal
from sqlalchemy import create_engine
from stator._bench._models import BenchPlainRow
from stator._store import Store
DB = "hsql_explainw"
adm = psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True)
adm.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"); adm.execute(f"CREATE DATABASE {DB}")
T = "stator_bench_plain_rows"
c = psycopg.connect(f"host=127.0.0.1 user=postgres dbname={DB}")
binary_times(c.adapters)
c.execute(f"CREATE TABLE {T} (id integer PRIMARY KEY, state text NOT NULL, state_changed timestamptz NOT NULL, state_next timestamptz, state_attempts integer NOT NULL DEFAULT 0)")
c.execute(f"CREATE INDEX ix_due ON {T} (state, state_next) WHERE state_next IS NOT NULL")
now = datetime.now(UTC)
c.execute(f"INSERT INTO {T} SELECT g, (ARRAY['first','second','third'])[1 + g %% 3], now(), %s FROM generate_series(1, 20000) g", (now,))
c.commit(); c.autocommit = True; c.execute(f"VACUUM ANALYZE {T}"); c.autocommit = False
e = create_engine("postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
w = Store(e, [BenchPlainRow]).tracked[0].sql.write
w = re.sub(r"(?<!:):([a-z_0-9]+)", lambda m: "%(" + m.group(1) + ")s", w)
ids = list(range(1000, 1100))
p = {"b_pk": array_literal(ids), "b_fence_state": array_literal(["first" if i % 3 == 2 else "second" if i % 3 == 0 else "third" for i in ids]),
     "b_fence": TimeArray([now] * 100), "b_state": array_literal(["x"] * 100), "b_changed": TimeArray([now] * 100), "b_next": TimeArray([now] * 100), "b_attempts": array_literal([0] * 100)}
c.execute("SET plan_cache_mode = force_generic_plan")
for i in range(2):
    r = c.execute("EXPLAIN (ANALYZE, BUFFERS) " + w, p).fetchall()
    c.rollback(); c.execute("SET plan_cache_mode = force_generic_plan")
print("\n".join(x[0] for x in r))
c.close(); adm.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
