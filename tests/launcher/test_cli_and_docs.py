"""The launcher's commands on bad input (one ``error:`` line, no traceback), and the
documentation's example of sending a message, executed."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from sqlalchemy.orm import Session

from stator._store._schema import messages_table

from .conftest import Launch

PAGE = Path(__file__).parents[2] / "docs" / "operations" / "launcher.md"


def test_user_mistakes_get_one_error_line(launch: Launch) -> None:
    cases = [
        (["launcher", "tenant_app:stator"], 2, "nothing to launch"),
        (["launcher", "tenant_app:stator", "--db", "mysql://h/x"], 2, "sqlite:// and postgres"),
        (["launcher", "tenant_app:stator", "--db", "sqlite:///x.db", "--max-workers", "1"], 2,
         "--max-workers"),
        (["ctl", "start", "sqlite:///missing.db"], 2, "no SQLite database at"),
        (["launcher-status"], 1, "no launcher state in .stator-launcher"),  # no launcher: 1
    ]
    bare = launch.url("bare")  # a database without Stator's tables
    launch.tenant("bare", migrated=False)
    cases.append((["ctl", "restart", bare], 2, "run `stator migrate APP`"))
    for args, code, message in cases:
        done = launch.cli(*args)
        assert done.returncode == code, (args, done.stdout, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)


def test_the_documented_example_runs(launch: Launch) -> None:
    example = re.search(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert example is not None
    url = launch.tenant("readme")
    engine = launch.stator(url).engine
    code = example.group(1).replace("timeout=10", "timeout=0.05")  # no launcher will answer
    namespace = {"Session": Session, "engine": engine, "log": logging.getLogger("readme")}
    exec(compile(code, str(PAGE), "exec"), namespace)
    with engine.connect() as conn:
        assert conn.execute(messages_table.select()).one().kind == "restart"
