#!/usr/bin/env bash
# Install the peer job systems that benchmarks/peers/run.py measures, away from stator:
#   - a virtualenv benchmarks/peers/.venv with requirements.txt (pgqueuer, procrastinate,
#     huey and their PostgreSQL drivers); these are never dependencies of the stator package;
#   - if node and npm are present, graphile-worker (package.json) into benchmarks/peers/.node.
# Both folders are gitignored. Idempotent: each part records a hash of what it installed and
# is skipped while that hash still matches, so a second run takes well under a second.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="$HERE/.venv"
NODE_DIR="$HERE/.node"
PYTHON="${PYTHON:-python3}"

# A short fingerprint of the given strings, to compare with the stamp of the last install.
fingerprint() {
    printf '%s\n' "$@" | sha256sum | cut -c1-16
}

setup_python() {
    local want
    want="$(fingerprint "$(cat "$HERE/requirements.txt")" "$("$PYTHON" --version 2>&1)")"
    if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.installed" 2>/dev/null)" = "$want" ]; then
        echo "peers: python packages already installed ($VENV)"
        return
    fi
    echo "peers: installing python packages into $VENV"
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    # -qq: only errors; a plain -q still prints pip's per-index warnings on some machines.
    "$VENV/bin/python" -m pip install -qq --disable-pip-version-check -r "$HERE/requirements.txt"
    echo "$want" > "$VENV/.installed"
}

setup_node() {
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        echo "peers: node/npm not found; graphile-worker will be skipped"
        return
    fi
    local want
    want="$(fingerprint "$(cat "$HERE/package.json")" "$(node --version)")"
    if [ -f "$NODE_DIR/node_modules/graphile-worker/package.json" ] \
        && [ "$(cat "$NODE_DIR/.installed" 2>/dev/null)" = "$want" ]; then
        echo "peers: graphile-worker already installed ($NODE_DIR)"
        return
    fi
    echo "peers: installing graphile-worker into $NODE_DIR"
    mkdir -p "$NODE_DIR"
    cp "$HERE/package.json" "$NODE_DIR/package.json"
    (cd "$NODE_DIR" && npm install --no-audit --no-fund --loglevel=error)
    echo "$want" > "$NODE_DIR/.installed"
}

setup_python
setup_node
