#!/bin/bash
# Same-window before/after (issue 23 closing round): the issue's commit (9626597, in a worktree at
# /work/wt/issue23-base) and main, interleaved, PostgreSQL and SQLite; 9626597 has no plain rows
# and its CLI module is stator._cli, hence the import below.
# usage: final-round.sh OUTFILE ROUNDS
OUT=$1; R=${2:-2}
PG=postgresql+psycopg://postgres@127.0.0.1:5432/postgres
for i in $(seq 1 $R); do
  for side in before after; do
    if [ $side = before ]; then export PYTHONPATH=/work/wt/issue23-base/src; else unset PYTHONPATH; fi
    for db in pg sqlite; do
      args="--scenario throughput,limit --processes 1 --rows 20000 --json"; [ $side = after ] && args="$args --plain-rows"
      [ $db = pg ] && args="$args --db $PG"
      echo "# round $i $side $db $(date -u +%H:%M:%S) $(cut -d' ' -f1 /proc/loadavg)" >> $OUT
      /work/main/.venv-test/bin/python -c "import sys, importlib, importlib.util as u; m = importlib.import_module('stator.cli' if u.find_spec('stator.cli') else 'stator._cli'); sys.argv[0] = 'stator'; m.main()" bench $args 2>/dev/null | grep '^{' | sed "s/^{/{\"side\": \"$side\", /" >> $OUT
    done
  done
done
