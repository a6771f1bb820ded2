"""Mistakes a user can make, through the real ``stator`` command: each one ends with exactly
one ``error:`` line naming the fix, no traceback, the documented exit code (2 for a mistake
in the input, 1 for a database that cannot be reached), and no row changed.

(``tests/processes/`` covers a missing module or attribute, an unmigrated database for
``run``, and bad options; ``tests/test_schema.py`` the same checks through the Python API.)
Also: rows holding a state the graph does not know (a state renamed in a deploy) are left
exactly as they are by a running worker, which does not crash, and ``status`` shows them as
unknown.
"""

from __future__ import annotations

import json
import socket
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, text

from processes.app_fixture import STEPS
from processes.procs import ProcApp

pytestmark = pytest.mark.slow

APP = "app_fixture:stator"
MIGRATE = "stator migrate"
KNOWN, LEGACY, RENAMED = 1000, 60, 40  # rows in known states, in 'legacy' (due), 'renamed'



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_module(name: str, source: str) -> Callable[[ProcApp], None]:
    def setup(app: ProcApp) -> None:
        (app.dir / f"{name}.py").write_text(source)
    return setup


def migrated(app: ProcApp) -> None:
    app.migrate()
    app.insert(5)


def sql(*statements: str) -> Callable[[ProcApp], None]:
    def setup(app: ProcApp) -> None:
        migrated(app)
        with app.engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))
    return setup


def nothing(app: ProcApp) -> None:
    pass


INVALID_GRAPH = """
from stator import State, StateGraph, Stator
from app_fixture import Job

class Broken(StateGraph):
    new = State()
    sent = State()
    new.transitions_to(sent)   # but no check_new handler
"""

# name -> (setup, stator arguments, exit code, fragments of the error line); "{port}" is a
# port nothing listens on.  Cases that do not depend on the backend run once, on SQLite.
ANY_BACKEND: dict[str, tuple[Callable[[ProcApp], None], tuple[str, ...], int, tuple[str, ...]]] = {
    "url-not-a-url": (nothing, ("run", APP, "--db", "not a url at all"), 2,
                      ("not a database URL", "sqlite:///")),
    "url-unsupported": (nothing, ("run", APP, "--db", "mysql://me@localhost/app"), 2,
                        ("supports sqlite:// and postgresql://",)),
    "sqlite-directory-missing": (nothing, ("run", APP, "--db", "sqlite:////nonexistent/x.db"), 2,
                                 ("no database at /nonexistent/x.db", "stator migrate")),
    # (a long-running `run` waits for a server that is down: tests/test_cli_user.py)
    "server-unreachable": (
        nothing, ("run", APP, "--until-idle", "--db",
                  "postgresql://postgres@127.0.0.1:{port}/app"), 1,
        ("Connection refused", "check the database URL"),
    ),
    "app-raises-on-import": (
        write_module("broken_app", "import os\nstator = undefined_name\n"),
        ("run", "broken_app:stator"), 2,
        ("NameError: name 'undefined_name' is not defined", "broken_app.py, line 2",
         "fix the module"),
    ),
    "app-missing-dependency": (
        write_module("broken_app", "import nosuch_dependency\n"), ("status", "broken_app:stator"),
        2, ("No module named 'nosuch_dependency'", "install what it imports"),
    ),
    "app-syntax-error": (
        write_module("broken_app", "def f(:\n"), ("migrate", "broken_app:stator"), 2,
        ("SyntaxError", "broken_app.py, line 1"),
    ),
    "invalid-graph": (
        write_module("broken_app", INVALID_GRAPH), ("run", "broken_app:stator"), 2,
        ("Broken.new: has transitions out but no handler", "define check_new"),
    ),
}
EACH_BACKEND: dict[str, tuple[Callable[[ProcApp], None], tuple[str, ...], int, tuple[str, ...]]] = {
    "not-migrated-status": (nothing, ("status", APP), 2, ("no Stator tables", MIGRATE)),
    "table-missing": (sql("DROP TABLE proc_jobs"), ("run", APP), 2,
                      ("table proc_jobs does not exist", MIGRATE)),
    "columns-missing": (
        sql("DROP TABLE proc_jobs", "CREATE TABLE proc_jobs (id INTEGER PRIMARY KEY)",
            "INSERT INTO proc_jobs (id) VALUES (1), (2), (3)"),
        ("run", APP), 2,
        ("table proc_jobs lacks Stator column(s) state, state_changed, state_next, "
         "state_attempts", MIGRATE),
    ),
    "older-schema": (sql("UPDATE stator_schema SET version = 0"), ("run", APP), 2,
                     ("Stator schema is version 0", MIGRATE)),
    "newer-schema-run": (sql("UPDATE stator_schema SET version = 99"), ("run", APP), 2,
                         ("version 99", "upgrade the stator-engine package")),
    "newer-schema-status": (sql("UPDATE stator_schema SET version = 99"), ("status", APP), 2,
                            ("version 99", "upgrade the stator-engine package")),
    "newer-schema-migrate": (sql("UPDATE stator_schema SET version = 99"), ("migrate", APP), 2,
                             ("version 99", "upgrade the stator-engine package")),
}


def snapshot(app: ProcApp) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table in the test's database."""
    found: dict[str, list[tuple[Any, ...]]] = {}
    with app.engine.connect() as conn:
        for table in sorted(inspect(conn).get_table_names()):
            rows = conn.execute(text(f"SELECT * FROM {table}"))
            found[table] = sorted(tuple(str(v) for v in row) for row in rows)
    return found


def check_one_error_line(
    app: ProcApp, args: tuple[str, ...], code: int, fragments: tuple[str, ...]
) -> None:
    before = snapshot(app)
    args = tuple(a.replace("{port}", str(_free_port())) for a in args)

    result = app.cli(*args)

    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert snapshot(app) == before, "a row changed"


@pytest.fixture
def sqlite_app(tmp_path: Path) -> Iterator[ProcApp]:
    """For the mistakes that do not depend on the backend: a SQLite file."""
    app = ProcApp(f"sqlite:///{tmp_path / 'stator.db'}", tmp_path)
    try:
        yield app
    finally:
        app.close()


@pytest.mark.parametrize("case", list(ANY_BACKEND))
def test_mistakes_outside_the_database(sqlite_app: ProcApp, case: str) -> None:
    setup, args, code, fragments = ANY_BACKEND[case]
    setup(sqlite_app)
    check_one_error_line(sqlite_app, args, code, fragments)


@pytest.mark.parametrize("case", list(EACH_BACKEND))
def test_mistakes_in_the_database(proc_app: ProcApp, case: str) -> None:
    setup, args, code, fragments = EACH_BACKEND[case]
    setup(proc_app)
    check_one_error_line(proc_app, args, code, fragments)


def test_a_missing_database_on_a_reachable_server(proc_app: ProcApp) -> None:
    if proc_app.backend != "postgresql":
        pytest.skip("PostgreSQL: a server without that database")
    url = proc_app.engine.url.set(database="stator_no_such_database", query={})
    db = url.render_as_string(hide_password=False)
    check_one_error_line(proc_app, ("run", APP, "--db", db), 1,
                         ('database "stator_no_such_database" does not exist',
                          "check the database URL"))


def test_rows_in_states_the_graph_does_not_know_are_left_alone(proc_app: ProcApp) -> None:
    """A deploy renamed a state (or removed it) while rows still hold the old name: a worker
    runs the rest and leaves those rows exactly as they are; `status` shows them as unknown."""
    proc_app.migrate()
    proc_app.insert(KNOWN + LEGACY + RENAMED)
    with proc_app.engine.begin() as conn:
        conn.execute(text(f"UPDATE proc_jobs SET state = 'legacy' WHERE id > {KNOWN}"))  # due
        conn.execute(text(
            f"UPDATE proc_jobs SET state = 'renamed', state_next = NULL "
            f"WHERE id > {KNOWN + LEGACY}"
        ))
    unknown_before = [r for r in proc_app.rows() if r.id > KNOWN]

    workers = [proc_app.spawn("--until-idle", "--concurrency", "4") for _ in range(2)]
    for worker in workers:
        assert worker.wait(120) == 0, worker.describe()
        assert "Traceback" not in worker.stderr(), worker.describe()

    rows = proc_app.rows()
    assert [r for r in rows if r.id > KNOWN] == unknown_before
    assert all(r.state == "done" for r in rows if r.id <= KNOWN)
    pairs = Counter((row_id, step) for row_id, step, _pid in proc_app.ledger())
    assert set(pairs) == {(i, step) for i in range(1, KNOWN + 1) for step in STEPS}
    assert max(pairs.values()) == 1

    result = proc_app.cli("status", APP, "--json")
    assert result.returncode == 0, result.stderr
    states = {s["state"]: s for s in json.loads(result.stdout)["models"][0]["states"]}
    for name, count in (("legacy", LEGACY), ("renamed", RENAMED)):
        shown = (states[name]["role"], states[name]["known"], states[name]["rows"])
        assert shown == ("unknown", False, count), states[name]
    assert (states["done"]["role"], states["done"]["rows"]) == ("terminal", KNOWN)
    text_status = proc_app.cli("status", APP)
    assert text_status.returncode == 0, text_status.stderr
    lines = text_status.stdout.splitlines()
    assert any("legacy" in line and "unknown" in line for line in lines), text_status.stdout
