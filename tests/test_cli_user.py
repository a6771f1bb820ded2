"""What a new user meets at the ``stator`` command, run in-process (fast): one clear line
for every mistake, user text printed as given, and no file or row created by accident."""

from __future__ import annotations

import gc
import itertools
import logging
import os
import signal
import socket
import sqlite3
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url

from pgserver import PG_ADMIN_URL
from stator._cli import main

_names = itertools.count()

APP_SOURCE = '''
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from stator import State, StateGraph, Stator
from stator.sqlalchemy import StatorMixin


class Base(DeclarativeBase):
    pass


class Steps(StateGraph):
    new = State(retry_after=1)
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row):
        return cls.done


class Job(StatorMixin, Base):
    __tablename__ = {table!r}
    state_graph = Steps
    id: Mapped[int] = mapped_column(primary_key=True)


stator = Stator({url!r}, models=[Job])
'''


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``stator ARGS`` in this process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as info:
        main(list(args))
    captured = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 0), captured.out, captured.err


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path


def write_app(directory: Path, url: str, table: str = "jobs") -> str:
    """A module holding a one-model Stator on ``url``; returns its APP name."""
    name = f"user_app_{next(_names)}"
    (directory / f"{name}.py").write_text(APP_SOURCE.format(url=url, table=table))
    sys.modules.pop(name, None)
    return f"{name}:stator"


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


# -- item 4: user text is printed as given ------------------------------------------------------


def test_an_app_name_that_looks_like_markup_is_printed_as_given(app_dir, capsys):
    code, _out, err = run_cli(capsys, "status", "[/x]:stator")
    assert code == 2
    assert "[/x]" in one_error_line(err)


def test_an_error_mentioning_an_extra_keeps_its_brackets(app_dir, capsys):
    app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
    code, _out, err = run_cli(capsys, "status", app, "--db", "postgresql+nosuchdriver://h/d")
    assert code == 2
    assert "stator-engine[postgresql]" in one_error_line(err)


# -- item 7: no empty file where a database was expected ----------------------------------------


@pytest.mark.parametrize("command", [("status",), ("run", "--until-idle")])
def test_a_missing_sqlite_file_is_reported_not_created(app_dir, capsys, command):
    path = app_dir / "nowhere.db"
    app = write_app(app_dir, f"sqlite:///{path}")
    code, _out, err = run_cli(capsys, command[0], app, *command[1:])
    assert code == 2
    line = one_error_line(err)
    assert f"no database at {path}" in line and "stator migrate" in line
    assert not path.exists()


# -- item 9: migrate tells the truth about the launcher -----------------------------------------


def test_migrate_says_no_launcher_heard_it_when_none_runs(app_dir, capsys):
    app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
    code, out, _err = run_cli(capsys, "migrate", app)
    assert code == 0
    assert "sent restart to the launcher" not in out
    assert "none runs from this directory; one running elsewhere acts on it" in out  # unwrapped


def test_migrate_says_it_told_a_launcher_that_listens(app_dir, capsys):
    from stator._launcher._place import DEFAULT_PLACE, Place

    place = Place(app_dir / DEFAULT_PLACE)
    place.path.mkdir()
    place.open_wake()  # what a running launcher listens on
    try:
        app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
        code, out, _err = run_cli(capsys, "migrate", app)
    finally:
        place.close_wake()
    assert code == 0
    assert "sent restart to the launcher" in out


# -- item 8: a second SIGTERM forces the stop, as a second Ctrl-C does --------------------------


class Forced(Exception):
    pass


@pytest.mark.parametrize("signals", [("SIGINT", "SIGINT"), ("SIGTERM", "SIGTERM"),
                                     ("SIGTERM", "SIGINT"), ("SIGINT", "SIGTERM")])
def test_the_second_stop_signal_of_either_kind_forces_the_exit(monkeypatch, signals):
    import signal

    from stator import _cli

    def force(message: str) -> None:
        raise Forced(message)

    monkeypatch.setattr(_cli, "_force_exit", force)
    stops: list[str] = []
    first, second = (getattr(signal, name) for name in signals)
    with _cli.stop_signals(stops.append, "forced"):
        signal.raise_signal(first)
        assert stops == [f"signal {signals[0]}"]
        with pytest.raises(Forced):
            signal.raise_signal(second)
    assert signal.getsignal(signal.SIGTERM) is not None


def test_run_help_says_a_second_sigterm_forces(capsys):
    code, out, _err = run_cli(capsys, "run", "--help")
    assert code == 0
    assert "second Ctrl-C or SIGTERM" in " ".join(out.split())


# -- item 1: errors that waiting cannot cure end the command with one line ----------------------


def test_run_until_idle_on_a_read_only_file_ends_with_one_line(app_dir, capsys):
    path = app_dir / "a.db"
    app = write_app(app_dir, f"sqlite:///{path}")
    assert run_cli(capsys, "migrate", app)[0] == 0
    read_only = f"sqlite:///file:{path}?mode=ro&uri=true"
    code, _out, err = run_cli(capsys, "run", app, "--db", read_only, "--until-idle")
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "readonly" in errors[0], err
    assert "Traceback" not in err


def test_migrate_on_a_read_only_file_ends_with_one_line(app_dir, capsys):
    path = app_dir / "a.db"
    sqlite3.connect(path).close()  # an empty database
    app = write_app(app_dir, f"sqlite:///file:{path}?mode=ro&uri=true")
    code, _out, err = run_cli(capsys, "migrate", app)
    assert code != 0
    assert "readonly" in one_error_line(err)


# -- item 6: a database that is down at start ---------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_run_waits_for_a_database_down_at_start_and_stops_at_once(app_dir, capsys, caplog):
    app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
    down = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"

    def stop_once_waiting() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any("database unavailable" in r.getMessage() for r in list(caplog.records)):
                break
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    stopper = threading.Thread(target=stop_once_waiting)
    with caplog.at_level(logging.INFO, logger="stator"):
        stopper.start()
        try:
            code, _out, err = run_cli(capsys, "run", app, "--db", down)
        finally:
            stopper.join()
    assert code == 0, err
    messages = [r.getMessage() for r in caplog.records]
    assert sum("database unavailable" in m for m in messages) == 1
    assert any("stopped before the database could be reached" in m for m in messages)


@pytest.mark.parametrize("command", [("run", "--until-idle"), ("status",), ("migrate",)])
def test_one_off_commands_fail_fast_when_the_database_is_down(app_dir, capsys, command):
    app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
    down = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"
    code, _out, err = run_cli(capsys, command[0], app, "--db", down, *command[1:])
    assert code == 1
    assert "database error" in one_error_line(err)


# -- item 10: launcher-status ---------------------------------------------------------------------


def test_launcher_status_without_a_launcher_exits_1(app_dir, capsys):
    code, _out, err = run_cli(capsys, "launcher-status", "--control", str(app_dir / "none"))
    assert code == 1
    assert "no launcher state" in one_error_line(err)


def test_launcher_status_shows_long_urls_whole_and_pads_nothing(app_dir, capsys):
    import json

    url = "postgresql://db.internal.example.com:5432/" + "tenant_with_a_rather_long_name_" * 3
    error = "connection to server at db.internal.example.com failed: " + "x" * 120
    place = app_dir / "place"
    place.mkdir()
    (place / "state.json").write_text(json.dumps({
        "launcher": {"pid": 1, "running": True, "started_at": "2026-01-01T00:00:00+00:00",
                     "updated_at": "2026-01-01T00:00:00+00:00", "slots_used": 1,
                     "max_workers": 4, "waiting": 0},
        "databases": [{"database": url, "state": "enabled", "slot": False, "pid": None,
                       "started_at": None, "starts": 3, "restarts": 1, "last_error": error}],
    }))
    code, out, _err = run_cli(capsys, "launcher-status", "--control", str(place))
    assert code == 1  # no launcher holds the place
    assert url in out and error in out  # each on one line, whole
    assert all(line == line.rstrip() for line in out.splitlines())


def test_log_lines_in_files_are_neither_wrapped_nor_padded(app_dir):
    app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
    logged = run_for_migrated(app_dir, app).stderr
    lines = logged.splitlines()
    # the start line names the worker, its models, the URL and more: far over 80 columns
    assert any("worker" in line and "concurrency 4" in line and "a.db" in line
               for line in lines), logged
    assert all(line == line.rstrip() for line in lines), logged


def run_for_migrated(app_dir: Path, app: str) -> Any:
    import subprocess

    subprocess.run([sys.executable, "-c", "from stator._cli import main; main()", "migrate",
                    app], cwd=app_dir, capture_output=True, check=True, timeout=60)
    return subprocess.run(
        [sys.executable, "-c", "from stator._cli import main; main()", "run", app,
         "--until-idle", "--idle-window", "0.1"],
        cwd=app_dir, capture_output=True, text=True, timeout=60,
        env={**os.environ, "COLUMNS": "80"},
    )


def test_uninstall_on_a_missing_sqlite_file_creates_nothing(app_dir, capsys):
    path = app_dir / "nowhere.db"
    app = write_app(app_dir, f"sqlite:///{path}")
    code, out, _err = run_cli(capsys, "uninstall", app, "--yes")
    assert code == 0 and "nothing to remove" in out
    assert not path.exists()


def test_run_does_not_wait_for_a_database_that_does_not_exist(app_dir, capsys):
    """A server that answers "no such database" (or "wrong password") will not change its
    mind: even a long-running `stator run` says so at once."""
    app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
    url = make_url(PG_ADMIN_URL).set(database="stator_no_such_database_here")
    code, _out, err = run_cli(capsys, "run", app, "--db",
                              url.render_as_string(hide_password=False))
    assert code == 1
    assert "does not exist" in one_error_line(err)


# -- commands run in-process close what they opened ---------------------------------------------


def test_a_command_run_in_process_leaves_no_connection_open(app_dir, capsys, backend):
    """``main`` called from code (tests, an application's own scripts) must close the pooled
    connections of the Stator it used, with ``--db`` or without: left to the garbage
    collector, they are found open at some later, unrelated moment."""
    app = write_app(app_dir, backend)
    assert run_cli(capsys, "migrate", app)[0] == 0
    assert run_cli(capsys, "status", app, "--db", backend)[0] == 0
    sys.modules.pop(app.split(":")[0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
