#!/usr/bin/env bash
# The CI form of the peer benchmark: install the peers (setup.sh) and run each of them on
# 2,000 jobs (run.py --quick). The figures are not the point here; the point is that the
# harness still works against the peers' current releases, so it fails (non-zero) when any
# peer fails to process its jobs. graphile-worker is included only where node exists.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"

bash "$HERE/setup.sh"

systems="pgqueuer,procrastinate,huey"
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    systems="$systems,graphile-worker"
fi

# CI results go to a scratch file, not to benchmarks/results/peers.jsonl: quick runs are
# not figures anybody should compare against.
out="$(mktemp -t stator-peers-ci.XXXXXX.jsonl)"
trap 'rm -f "$out"' EXIT
"$HERE/.venv/bin/python" "$HERE/run.py" --quick --systems "$systems" --timeout 120 \
    --out "$out" >/dev/null
