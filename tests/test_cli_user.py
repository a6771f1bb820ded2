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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url

from pgserver import PG_ADMIN_URL
from stator.cli import main

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


def test_status_lists_every_state_with_its_zero(app_dir, capsys):
    app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
    assert run_cli(capsys, "migrate", app)[0] == 0
    code, out, _err = run_cli(capsys, "status", app)
    assert code == 0
    listed = [line.split("│")[1:5] for line in out.splitlines() if line.count("│") > 5]
    # The model as people name it (its class; Django's app.Model), not its table (jobs).
    assert [[cell.strip() for cell in cells] for cells in listed] == [
        ["Job", "new", "initial", "0"], ["Job", "done", "terminal", "0"]]


# -- item 9: migrate tells the truth about the launcher -----------------------------------------


def test_migrate_says_one_line_and_no_launcher_when_none_is_known(app_dir, capsys):
    path = app_dir / "a.db"
    app = write_app(app_dir, f"sqlite:///{path}")
    code, out, _err = run_cli(capsys, "migrate", app)
    assert code == 0
    [line] = out.splitlines()
    assert line.startswith(f"sqlite:///{path}: migrated (stator schema upgraded to version ")
    assert "created table" in line and "launcher" not in line
    code, out, _err = run_cli(capsys, "migrate", app)
    assert code == 0 and out.splitlines() == [f"sqlite:///{path}: already up to date"]


def test_migrate_names_a_launcher_that_answered_this_database_before(app_dir, capsys):
    from sqlalchemy import create_engine, update

    from stator._store._schema import messages_table

    path = app_dir / "a.db"
    app = write_app(app_dir, f"sqlite:///{path}")
    assert run_cli(capsys, "migrate", app)[0] == 0
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:  # as a launcher elsewhere does when it reads the message
        conn.execute(update(messages_table).values(handled_at=datetime.now(UTC), ack=True))
        conn.exec_driver_sql("DROP TABLE jobs")  # something left to migrate
    engine.dispose()
    code, out, _err = run_cli(capsys, "migrate", app)
    assert code == 0
    [line] = out.splitlines()
    assert line.endswith("for the launcher)") and "left restart message" in line


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
    [line] = out.splitlines()
    assert line.endswith("; sent restart to the launcher)")


# -- item 8: a second SIGTERM forces the stop, as a second Ctrl-C does --------------------------


class Forced(Exception):
    pass


@pytest.mark.parametrize("signals", [("SIGINT", "SIGINT"), ("SIGTERM", "SIGTERM"),
                                     ("SIGTERM", "SIGINT"), ("SIGINT", "SIGTERM")])
def test_the_second_stop_signal_of_either_kind_forces_the_exit(monkeypatch, signals):
    import signal

    from stator._worker import serving

    def force(message: str) -> None:
        raise Forced(message)

    monkeypatch.setattr(serving, "force_exit", force)
    stops: list[str] = []
    first, second = (getattr(signal, name) for name in signals)
    with serving.stop_signals(stops.append, "forced"):
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

    subprocess.run([sys.executable, "-c", "from stator.cli import main; main()", "migrate",
                    app], cwd=app_dir, capture_output=True, check=True, timeout=60)
    return subprocess.run(
        [sys.executable, "-c", "from stator.cli import main; main()", "run", app,
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


# -- issue 20, item 11: careless input is one line, and a mistaken command changes nothing -----


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_sqlite_database_is_refused_in_one_line(app_dir, capsys, url):
    app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
    code, _out, err = run_cli(capsys, "status", app, "--db", url)
    assert code == 2
    assert "in-memory SQLite database" in one_error_line(err)


def test_a_url_that_cannot_be_parsed_is_one_line_that_hides_it(app_dir, capsys):
    app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
    code, _out, err = run_cli(capsys, "status", app, "--db", "postgresql://u:s3cret@[::1/db")
    assert code == 2
    assert "not a database URL" in one_error_line(err)
    assert "s3cret" not in err


def test_a_liveness_file_in_a_missing_folder_is_one_line(app_dir, capsys):
    app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
    assert run_cli(capsys, "migrate", app)[0] == 0
    code, _out, err = run_cli(capsys, "run", app, "--until-idle", "--liveness-file",
                              str(app_dir / "missing" / "live"))
    assert code == 2
    assert "cannot write the liveness file" in one_error_line(err)


@pytest.mark.parametrize("option", [("--idle-window", "nan"), ("--run-for", "nan"),
                                    ("--run-for", "inf"), ("--idle-window", "inf")])
def test_seconds_must_be_finite(app_dir, capsys, option):
    app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
    code, _out, err = run_cli(capsys, "run", app, "--until-idle", *option)
    assert code == 2
    assert "not a finite number of seconds" in one_error_line(err)


def test_the_worker_api_refuses_times_that_are_not_finite(app_dir, tmp_path):
    from stator.errors import ConfigError

    app = write_app(app_dir, f"sqlite:///{tmp_path / 'a.db'}")
    module = __import__(app.split(":")[0])
    for bad in ({"run_for": float("nan")}, {"run_for": float("inf")},
                {"idle_window": float("nan")}):
        with pytest.raises(ConfigError, match="number of seconds"):
            module.stator.worker(**bad)
    module.stator.dispose()


def test_the_liveness_file_appears_only_once_the_worker_runs(app_dir, tmp_path):
    """Checked when the worker is made, but created by its first heartbeat: a probe (or a
    test) that sees the file may signal the worker, which by then handles the signal."""
    from stator.errors import ConfigError

    app = write_app(app_dir, f"sqlite:///{tmp_path / 'a.db'}")
    module = __import__(app.split(":")[0])
    module.stator.migrate()
    alive = tmp_path / "alive"
    worker = module.stator.worker(liveness_file=alive, until_idle=True, idle_window=0)
    assert not alive.exists()
    worker.run()
    assert alive.exists()
    with pytest.raises(ConfigError, match="cannot write the liveness file"):
        module.stator.worker(liveness_file=tmp_path / "missing" / "alive")
    module.stator.dispose()


def test_concurrency_has_an_upper_bound_said_in_help(app_dir, capsys):
    from stator._limits import MAX_CONCURRENCY

    app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
    code, _out, err = run_cli(capsys, "run", app, "--until-idle", "--concurrency", "100000")
    assert code == 2
    assert "--concurrency" in one_error_line(err)
    code, out, _err = run_cli(capsys, "run", "--help")
    assert f"1 to {MAX_CONCURRENCY}" in " ".join(out.split())


def test_the_api_bounds_concurrency_too(app_dir):
    from stator._limits import MAX_CONCURRENCY
    from stator.errors import ConfigError

    app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
    module = __import__(app.split(":")[0])
    with pytest.raises(ConfigError, match=f"at most {MAX_CONCURRENCY}"):
        module.stator.worker(concurrency=MAX_CONCURRENCY + 1)
    module.stator.dispose()


@pytest.mark.parametrize("command", [("status",), ("run", "--until-idle")])
def test_a_command_pointed_at_another_sqlite_database_changes_nothing(app_dir, capsys, command):
    other, empty = app_dir / "other.db", app_dir / "empty.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE things (x)")
    sqlite3.connect(other).close()
    empty.touch()
    before = other.read_bytes()
    app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
    for path in (other, empty):
        code, _out, err = run_cli(capsys, command[0], app, "--db", f"sqlite:///{path}",
                                  *command[1:])
        assert code == 2
        assert "has no Stator tables" in one_error_line(err)
    assert other.read_bytes() == before  # still in its own journal mode: no switch to WAL
    assert empty.stat().st_size == 0
    assert sorted(p.name for p in app_dir.glob("*.db*")) == ["empty.db", "other.db"]


def test_migrate_still_puts_a_new_database_in_wal(app_dir, capsys):
    path = app_dir / "a.db"
    app = write_app(app_dir, f"sqlite:///{path}")
    assert run_cli(capsys, "migrate", app)[0] == 0
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


# A filesystem of our own, in a mount namespace of its own: it vanishes with the process.
# Tests run as root, where file permissions do not stop writes; a read-only or full
# filesystem does.
PRIVATE_MOUNT = """
set -e
mount -t tmpfs -o size={size} tmpfs "$PLACE" || exit 99
cd "$APP_DIR"
$PY -c "from stator.cli import main; main()" migrate "$APP" >/dev/null
"""


def in_private_mount(app_dir: Path, app: str, size: str, script: str) -> Any:
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    place = app_dir / "place"
    place.mkdir()
    env = {**os.environ, "PLACE": str(place), "APP_DIR": str(app_dir), "APP": app,
           "PY": sys.executable, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        ["unshare", "-m", "bash", "-c", PRIVATE_MOUNT.format(size=size) + script],
        capture_output=True, text=True, timeout=120, env=env,
    )
    if done.returncode == 99 or "unshare failed" in done.stderr:
        pytest.skip(f"cannot mount a filesystem here: {done.stderr.strip()}")
    return done


def test_a_database_on_a_read_only_filesystem_is_one_true_line(app_dir):
    app = write_app(app_dir, f"sqlite:///{app_dir / 'place' / 'a.db'}")
    done = in_private_mount(app_dir, app, "1m", """
mount -o remount,ro "$PLACE"
for command in status "run --until-idle" migrate; do
    set +e
    $PY -c "from stator.cli import main; main()" $command "$APP"
    echo "rc=$?"
done
""")
    assert done.stdout.split() == ["rc=2"] * 3, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 3 and all("is on a read-only filesystem" in line for line in lines)
    assert "Traceback" not in done.stderr


def test_a_disk_that_stays_full_ends_until_idle_with_one_line(app_dir):
    app = write_app(app_dir, f"sqlite:///{app_dir / 'place' / 'a.db'}")
    done = in_private_mount(app_dir, app, "256k", """
# Another process keeps the database open, so its WAL files exist once the disk is full.
$PY -c "
import sqlite3, sys
conn = sqlite3.connect('place/a.db')
conn.executemany('INSERT INTO jobs (id) VALUES (?)', [(i,) for i in range(1, 200)])
conn.commit()
print('ready', flush=True)
sys.stdin.read()
" < <(sleep 60 2>/dev/null) > ready 2>/dev/null &
holder=$!
while ! grep -q ready ready 2>/dev/null; do sleep 0.05; done
dd if=/dev/zero of=place/fill bs=1k 2>/dev/null || true
set +e
$PY -c "import stator._incurable as b; b.DISK_FULL_PATIENCE = 0.2
from stator.cli import main; main()" run "$APP" --until-idle
echo "rc=$?"
kill $holder
""")
    assert done.stdout.split() == ["rc=2"], done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "disk is full" in errors[0], done.stderr
    assert "Traceback" not in done.stderr


def test_the_workers_start_line_names_the_model_by_its_label(app_dir, capsys, caplog):
    app = write_app(app_dir, f"sqlite:///{app_dir / 'a.db'}")
    assert run_cli(capsys, "migrate", app)[0] == 0
    caplog.set_level(logging.INFO, logger="stator")
    code, _out, _err = run_cli(capsys, "run", app, "--until-idle", "--idle-window", "0.1")
    assert code == 0
    [start] = [r.getMessage() for r in caplog.records
               if getattr(r, "action", None) == "worker_start"]
    assert ": Job on sqlite:///" in start  # the class, as --models takes it; not "jobs"
