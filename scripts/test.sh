#!/usr/bin/env bash
# The one test entry point, for people and CI alike: make a virtualenv, install the package
# with its test extras, check types and style, build the docs, run the whole suite (SQLite +
# PostgreSQL).
# PostgreSQL is expected at 127.0.0.1:5432 (user postgres, trust auth); override with
# STATOR_TEST_PG=postgresql+psycopg://user@host:port/postgres.
# The Django tests run twice: with the main venv (Python 3.11, Django 5.2 LTS) and with a
# second one on Python 3.12 and Django 6.x (the django.tasks backend needs both).
# The tests get venvs of their own (.venv-test, .venv-django6): the quick start's .venv is
# left as the user made it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-test}
VENV6=${VENV6:-.venv-django6}

# -- What the run needs, checked before anything long starts ---------------------------------
# The first Python 3.12 that really runs (a pyenv shim may exist without one behind it).
PY312=""
for candidate in "$(command -v python3.12 || true)" "$HOME"/.pyenv/versions/3.12*/bin/python3; do
    if [ -n "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
        PY312="$candidate"
        break
    fi
done
if [ -z "$PY312" ] && [ ! -x "$VENV6/bin/python" ]; then
    echo "error: the Django 6 tests need Python 3.12 (python3.12 on PATH, or pyenv's 3.12.x)" >&2
    exit 2
fi
# Debian packages some tests use: tests/netns (iproute2), tests/pooler (PgBouncer), the
# browser tests (Chromium). Installed when running as root; otherwise those tests skip, each
# with its reason, and this says so now rather than after the long run.
missing=()
command -v ip >/dev/null || missing+=(iproute2)
command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
command -v chromium >/dev/null || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing ${missing[*]}"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
    else
        echo "note: ${missing[*]} not installed: the tests that need them will be skipped" \
             "(as root, this script installs them with apt-get)" >&2
    fi
fi

# -- Python 3.11 (or the default python3), Django 5.2 LTS: lint, types, the whole suite ------
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e ".[test,docs]"
"$VENV/bin/ruff" check src tests
"$VENV/bin/mypy"
# The layout's limits (docs/layout.md): no import cycle, no module over 400 lines, no branch on
# a database's name outside _store/_dialects/.
"$VENV/bin/python" scripts/layout_report.py --check
# The documentation site (docs/, mkdocs.yml): a broken link or anchor, a page missing from the
# navigation or an API name gone from the code fails the build. tests/test_docs.py runs its
# code blocks.
SITE=$(mktemp -d)
trap 'rm -rf "$SITE"' EXIT
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --quiet --site-dir "$SITE"
"$VENV/bin/python" -m pytest "$@"

# -- Python 3.12, Django 6.x: the Django tests again, the task backend among them, and the ----
# -- driver and engine suites, whose Django halves run on it too -----------------------------
if [ ! -x "$VENV6/bin/python" ]; then
    "$PY312" -m venv "$VENV6"
fi
"$VENV6/bin/python" -m pip install --quiet --upgrade pip
"$VENV6/bin/python" -m pip install --quiet -e ".[test]" "django>=6.0,<6.2"
"$VENV6/bin/python" -m pytest tests/django tests/driver tests/engine "$@"
