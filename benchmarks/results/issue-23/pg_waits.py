# Usage: python pg_waits.py SECONDS, during a bench run: wait events of the bench backends.
import psycopg, time, collections, sys
c = psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True)
cnt = collections.Counter(); n = 0
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for state, wt, we, q in c.execute("select state, wait_event_type, wait_event, left(query, 20) from pg_stat_activity where datname like 'stator_bench%%throughput' and pid <> pg_backend_pid()"):
        cnt[(state, wt, we, q if state == 'active' else '')] += 1
    n += 1
    time.sleep(0.02)
print("samples", n)
for k, v in cnt.most_common(25): print(v, k)
