#!/bin/bash
# usage: bench-plain.sh LABEL SRC — stator bench throughput --plain-rows on SQLite and PostgreSQL, SRC/src first on PYTHONPATH
LABEL=$1; SRC=$2
cd "$SRC" || exit 2
for db in sqlite pg; do
  if [ $db = pg ]; then DBARG=(--db postgresql+psycopg://postgres@127.0.0.1:5432/postgres); else DBARG=(); fi
  echo "== $LABEL $db $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=$SRC/src stator bench --scenario throughput --processes 1 \
      --rows 20000 --plain-rows "${DBARG[@]}" --json 2>/dev/null | grep '^{'
done
