#!/bin/bash
# Worker instructions per transition, by cachegrind (the machine's load does not move them):
# (Ir of 6,000 rows - Ir of 2,000 rows) / 12,000 transitions of prof_drain.py, on SQLite.
#   bash instructions.sh SRC [plain]     # SRC: a checkout's src/, put first on PYTHONPATH
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python}
refs() {
    PYTHONPATH=$1 valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
        "$PYTHON" "$HERE/prof_drain.py" sqlite "$2" $3 2>&1 \
        | awk '/I +refs/ {gsub(",", "", $NF); print $NF}'
}
small=$(refs "$1" 2000 "$2")
large=$(refs "$1" 6000 "$2")
echo "$1 ${2:-orm} instructions/transition=$(( (large - small) / 12000 ))"
