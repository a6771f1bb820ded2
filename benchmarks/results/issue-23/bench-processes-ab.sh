#!/bin/bash
# bench-processes-ab.sh OUT LABEL=SRC ... : one `stator bench` run (PostgreSQL, 1 and 2 worker
# processes, ORM and plain rows) per label, in the order given, with SRC (a checkout's src/)
# first on PYTHONPATH; summary lines (summ.py) appended to OUT.
OUT=$1; shift
for pair in "$@"; do
  label=${pair%%=*}; src=${pair#*=}
  echo "== $label $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $OUT
  PYTHONPATH=$src stator bench --db postgresql+psycopg://postgres@127.0.0.1:5432/postgres --scenario throughput --processes 1,2 --rows 20000 --plain-rows --json > run.json 2>/dev/null
  python3 summ.py run.json | sed "s/^run.json/$label/" >> $OUT
  echo "   end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $OUT
done
