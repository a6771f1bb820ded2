#!/usr/bin/env bash
# The one test entry point, for people and CI alike: make a virtualenv, install the package
# with its test extras, check types and style, run the whole suite (SQLite + PostgreSQL).
# PostgreSQL is expected at 127.0.0.1:5432 (user postgres, trust auth); override with
# STATOR_TEST_PG=postgresql+psycopg://user@host:port/postgres.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e ".[test]"
"$VENV/bin/ruff" check src tests
"$VENV/bin/mypy"
"$VENV/bin/python" -m pytest "$@"
