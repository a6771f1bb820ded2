#!/usr/bin/env bash
# The one test entry point, for people and CI alike: make a virtualenv, install the package
# with its test extras, check types and style, run the whole suite (SQLite + PostgreSQL).
# PostgreSQL is expected at 127.0.0.1:5432 (user postgres, trust auth); override with
# STATOR_TEST_PG=postgresql+psycopg://user@host:port/postgres.
# The Django tests run twice: with the main venv (Python 3.11, Django 5.2 LTS) and with a
# second one on Python 3.12 and Django 6.x (the django.tasks backend needs both).
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

VENV6=${VENV6:-.venv-django6}
if [ ! -x "$VENV6/bin/python" ]; then
    PY312=""
    # The first Python 3.12 that really runs (a pyenv shim may exist without one behind it).
    for candidate in "$(command -v python3.12 || true)" "$HOME"/.pyenv/versions/3.12*/bin/python3; do
        if [ -n "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
            PY312="$candidate"
            break
        fi
    done
    if [ -z "$PY312" ]; then
        echo "error: the Django 6 tests need Python 3.12 (python3.12 on PATH, or pyenv's 3.12.1)" >&2
        exit 2
    fi
    "$PY312" -m venv "$VENV6"
fi
"$VENV6/bin/python" -m pip install --quiet --upgrade pip
"$VENV6/bin/python" -m pip install --quiet -e ".[test]" "django>=6.0,<6.2"
"$VENV6/bin/python" -m pytest tests/django "$@"
