#!/bin/bash
# round-evening.sh OUT N BEFORE_SRC AFTER_SRC (run in this folder, the venv's bin first on PATH):
# N interleaved rounds of: the minimal loop by 1 and 2 processes (as the bench has it, then with
# its claim by ANY(ARRAY(...)): MINIMAL_ANY=1), then bench-processes-ab.sh for before and after
# (stator bench --processes 1,2 --plain-rows on PostgreSQL, each checkout's src/ first on PYTHONPATH).
OUT=$1; N=$2; BEFORE=$3; AFTER=$4
for i in $(seq 1 $N); do
  echo "== round $i minimal $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $OUT
  PYTHONPATH=$AFTER python minimal_processes.py 20000 1 2 >> $OUT 2>&1
  PYTHONPATH=$AFTER MINIMAL_ANY=1 python minimal_processes.py 20000 1 2 >> $OUT 2>&1
  bash bench-processes-ab.sh $OUT before=$BEFORE after=$AFTER
done
