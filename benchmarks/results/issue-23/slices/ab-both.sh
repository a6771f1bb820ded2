#!/usr/bin/env bash
# ab-both.sh OUT ROUNDS: main without this work (h-slices-old: main with its two code commits reverted)
# against main (h-slices-base), interleaved, order swapped each round
OUT=$1; ROUNDS=${2:-3}
PY=/work/wt/h-slices/.venv/bin/stator
PG=postgresql+psycopg://postgres@127.0.0.1:5432/postgres
for r in $(seq 1 $ROUNDS); do
  for db in sqlite pg; do
    for side in base new; do
      [ $((r % 2)) -eq 0 ] && side=$([ $side = base ] && echo new || echo base)
      src=/work/wt/h-slices-old/src; [ $side = new ] && src=/work/wt/h-slices-base/src
      args=(); [ $db = pg ] && args=(--db $PG)
      echo "# round $r $db $side $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" >> $OUT
      PYTHONPATH=$src $PY bench --scenario throughput --processes 1 --rows 20000 --plain-rows --json "${args[@]}" 2>&1 | grep '^{' >> $OUT
    done
  done
done
