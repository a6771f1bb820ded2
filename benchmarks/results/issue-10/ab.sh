#!/bin/bash
# usage: ab.sh URLKIND N  — alternate base and current, print rates
cd /tmp/perfwork
for i in $(seq 1 $2); do
  for side in base cur; do
    if [ $side = base ]; then PP=/tmp/perfwork/base/src; else PP=/work/wt/perf/src; fi
    if [ $1 = sqlite ]; then rm -f p.db*; URL=sqlite:////tmp/perfwork/p.db; else URL=postgresql+psycopg://postgres@127.0.0.1:5432/perf_prof; fi
    echo -n "$side $1: "; PYTHONPATH=$PP /work/wt/perf/.venv/bin/python prof_run.py $URL 20000
  done
done
