"""Drain N BenchRow rows with one in-process worker; print rate and CPU."""
import sys, time
from sqlalchemy import text
from stator._stator import Stator
from stator._bench._models import BenchRow
from stator._bench._places import insert_rows

url, rows = sys.argv[1], int(sys.argv[2])
conc = int(sys.argv[3]) if len(sys.argv) > 3 else 4
st = Stator(url, [BenchRow], concurrency=conc, batch_size=int(sys.argv[4]) if len(sys.argv) > 4 else 100)
if url.startswith("postgresql"):
    with st.engine.begin() as c:
        c.execute(text("DROP TABLE IF EXISTS stator_bench_rows"))
st.migrate()
insert_rows(st.engine, BenchRow.__tablename__, 1, rows)
w = st.worker(until_idle=True, idle_window=0.0)
cpu0 = time.process_time(); t0 = time.perf_counter()
s = w.run()
dt = time.perf_counter() - t0; cpu = time.process_time() - cpu0
print(f"transitions={s.transitions} seconds={dt:.2f} rate={s.transitions/dt:.0f}/s cpu_us_per_transition={cpu/s.transitions*1e6:.1f}", flush=True)
st.dispose()
