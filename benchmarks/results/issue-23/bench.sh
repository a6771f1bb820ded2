#!/bin/bash
# usage: bench.sh LABEL SRC_CHECKOUT — `stator bench --scenario throughput,limit` on SQLite and
# PostgreSQL with SRC_CHECKOUT/src first on PYTHONPATH (PGPROCS=1,2 for two process counts on
# PostgreSQL), one line per result. Run for the old and the new checkout in turn.
LABEL=$1; SRC=$2
cd "$SRC" || exit 2
for db in sqlite pg; do
  if [ $db = pg ]; then
    DBARG=(--db postgresql+psycopg://postgres@127.0.0.1:5432/postgres); PROCS=${PGPROCS:-1}
  else
    DBARG=(); PROCS=1
  fi
  echo "== $LABEL $db $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=$SRC/src stator bench --scenario throughput,limit --processes "$PROCS" \
      --rows 20000 "${DBARG[@]}" --json 2>/dev/null | grep '^{'
done
