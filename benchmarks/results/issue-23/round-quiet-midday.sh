#!/bin/bash
# usage: round.sh N — one interleaved round: base (a6ac8c0) then main, SQLite and PostgreSQL.
N=$1
PG=postgresql+psycopg://postgres@127.0.0.1:5432/postgres
for tree in base main; do
  if [ $tree = base ]; then SRC=/work/wt/base; EXTRA=(); else SRC=/work/main; EXTRA=(--plain-rows); fi
  for db in sqlite pg; do
    if [ $db = pg ]; then DB=(--db $PG); else DB=(); fi
    echo "== round $N $tree $db $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd $SRC && PYTHONPATH=$SRC/src /work/main/.venv-test/bin/stator bench --scenario throughput,limit --processes 1 --rows 20000 "${DB[@]}" "${EXTRA[@]}" --json 2>/dev/null | grep '^{')
  done
done
