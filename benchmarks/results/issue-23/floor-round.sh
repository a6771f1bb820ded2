#!/bin/bash
# Two rounds, interleaved: stator bench (throughput + limit, PostgreSQL, plain rows) with the
# minimal loop claiming by IN (SELECT …) ("old", a copy of src with _minimal.py as of 7238eee
# in /tmp/oldfloor/src) and by = ANY(ARRAY(SELECT …)) ("new", main). Output: floor-any.txt.
PG=postgresql+psycopg://postgres@127.0.0.1:5432/postgres
for r in 1 2; do
for tree in old new; do
  if [ $tree = old ]; then SRC=/tmp/oldfloor/src; else SRC=/work/main/src; fi
  echo "== round $r floor=$tree $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd /tmp && PYTHONPATH=$SRC /work/main/.venv-test/bin/stator bench --scenario throughput,limit --processes 1 --rows 20000 --db $PG --plain-rows --json 2>/dev/null | grep '^{')
done
done
