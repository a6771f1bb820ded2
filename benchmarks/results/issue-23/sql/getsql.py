"""Prints the PostgreSQL claim of BenchPlainRow as this checkout builds it (KEY=1 sets a dialect flag)."""
import json, sys
from sqlalchemy import create_engine
from stator._bench._models import BenchPlainRow
from stator._store import Store
from stator._store._dialects._postgres import PostgresDialect
from stator._store._statements import build_statements
e = create_engine("postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
t = Store(e, [BenchPlainRow]).tracked[0]
d = PostgresDialect()
for kv in sys.argv[1:]:
    k, v = kv.split("="); setattr(d, k, v == "1")
print(json.dumps(build_statements(t, d).claim))
