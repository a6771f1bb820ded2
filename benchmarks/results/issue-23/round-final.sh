#!/bin/bash
# usage: round-final.sh N — one interleaved round on a quiet machine: the session's start
# (29af96b, in /work/wt/base) then main, SQLite and PostgreSQL, ORM and plain rows; then
# PostgreSQL with 1 and 2 processes on main.
N=$1
PG=postgresql+psycopg://postgres@127.0.0.1:5432/postgres
for tree in base main; do
  if [ $tree = base ]; then SRC=/work/wt/base; else SRC=/work/main; fi
  for db in sqlite pg; do
    if [ $db = pg ]; then DB=(--db $PG); else DB=(); fi
    echo "== round $N $tree $db $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd $SRC && PYTHONPATH=$SRC/src /work/main/.venv-test/bin/stator bench --scenario throughput,limit --processes 1 --rows 20000 "${DB[@]}" --plain-rows --json 2>/dev/null | grep '^{')
  done
done
echo "== round $N main pg 1,2 processes $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
/work/main/.venv-test/bin/stator bench --scenario throughput --processes 1,2 --rows 20000 --db $PG --plain-rows --json 2>/dev/null | grep '^{'
