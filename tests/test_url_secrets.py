"""A database URL's secrets -- its password and secret query parameters (``?password=``,
``?sslpassword=``) -- never appear where a URL is shown: CLI errors, the status header, worker
log lines, the dashboard's footer, the launcher's keys, its ``state.json``, its log files and
their names.  Every one of those goes through ``stator._urls.shown``."""

from __future__ import annotations

import json
import logging
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from sqlalchemy import make_url
from starlette.testclient import TestClient

from launcher import tenant_app
from launcher.conftest import jobs, wait_until
from stator import Stator
from stator._launcher._place import Place
from stator._launcher._report import render, status_report
from stator._launcher._supervisor import Launcher, LauncherOptions
from stator._urls import shown
from stator.dashboard import create_app
from test_cli_user import one_error_line, run_cli, write_app

SECRET = "S3cr3t-PW"


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("tenant_app", None)


def with_secrets(url: str) -> str:
    """``url`` carrying SECRET in its query string (both databases ignore ``password`` there
    on these test servers) and, on PostgreSQL, as its password too (trust authentication)."""
    parsed = make_url(url).update_query_dict({"password": SECRET, "sslpassword": SECRET})
    if parsed.get_backend_name() == "postgresql":
        parsed = parsed.set(password=SECRET)
    return parsed.render_as_string(hide_password=False)


# -- the one function ---------------------------------------------------------------------------


@pytest.mark.parametrize("url", [
    f"postgresql://u:{SECRET}@h/db",
    f"postgresql://u@h/db?password={SECRET}&sslmode=require",
    f"postgresql://u@h/db?sslpassword={SECRET}",
    f"postgresql://u@h/db?PassWord={SECRET}&options=-csearch_path%3Dx",
    f"mysql://u:{SECRET}@h/db",
    f"postgresql+psycopg2://u:{SECRET}@h:5433/db",
    f"sqlite:///x.db?password={SECRET}",
    f"postgresql://u:{SECRET}@h:notaport/db?password={SECRET}",  # not a URL: masked as text
    f"postgresql://u:{SECRET}@[::1/db",
])
def test_shown_hides_passwords_and_secret_parameters(url: str) -> None:
    text = shown(url)
    assert SECRET not in text
    assert "***" in text


def test_a_url_is_shown_alike_as_text_and_as_an_object() -> None:
    url = f"postgresql://u:{SECRET}@h/db?sslpassword={SECRET}&sslmode=require"
    assert shown(url) == shown(make_url(url)) == (
        "postgresql://u:***@h/db?sslmode=require&sslpassword=***")


def test_shown_keeps_everything_that_is_not_a_secret() -> None:
    url = "postgresql://u@h:5433/db?passfile=/home/u/.pgpass&sslmode=require&password=x"
    assert shown(url) == ("postgresql://u@h:5433/db?passfile=%2Fhome%2Fu%2F.pgpass&password=***"
                          "&sslmode=require")


# -- CLI errors ---------------------------------------------------------------------------------


BAD_URLS = [
    f"mysql://u:{SECRET}@h/db",
    f"postgresql+psycopg2://u:{SECRET}@h/db",
    f"mysql://u@h/db?password={SECRET}",
    f"postgresql://u:{SECRET}@h:notaport/db",
]


@pytest.mark.parametrize("url", BAD_URLS)
@pytest.mark.parametrize("command", ["status", "launcher-db", "launcher-discover", "ctl",
                                     "bench", "listen-url"])
def test_an_unusable_url_is_one_error_line_without_its_secret(
    app_dir: Path, capsys: pytest.CaptureFixture[str], url: str, command: str
) -> None:
    app = write_app(app_dir, f"sqlite:///{app_dir / 'app.db'}")
    args = {
        "status": ["status", app, "--db", url],
        "launcher-db": ["launcher", app, "--db", url],
        "launcher-discover": ["launcher", app, "--discover", url],
        "ctl": ["ctl", "restart", url],
        "bench": ["bench", "--db", url],
        "listen-url": ["run", app, "--until-idle", "--listen-url", url],
    }[command]
    if command == "listen-url" and "notaport" not in url:
        pytest.skip("--listen-url is checked only for being a URL")
    if command in ("launcher-db", "launcher-discover", "ctl", "bench") and "psycopg2" in url:
        pytest.skip("the launcher and bench take any PostgreSQL driver name to mean psycopg")
    if command == "listen-url":
        assert run_cli(capsys, "migrate", app)[0] == 0
    code, out, err = run_cli(capsys, *args)
    assert code == 2, err
    line = one_error_line(err)
    assert SECRET not in out + err
    assert "***" in line, line


# -- what every command shows, on both databases ----------------------------------------------


def test_status_worker_log_and_dashboard_footer_hide_the_secrets(
    backend: str, app_dir: Path, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = with_secrets(backend)
    app = write_app(app_dir, f"sqlite:///{app_dir / 'unused.db'}")
    shown_url = shown(url)
    assert "password=***" in shown_url

    code, out, err = run_cli(capsys, "migrate", app, "--db", url)
    assert code == 0, err
    assert shown_url in out and SECRET not in out + err

    code, out, err = run_cli(capsys, "status", app, "--db", url)  # the header
    assert code == 0, err
    assert SECRET not in out + err and "Stator status" in out
    code, out, err = run_cli(capsys, "status", app, "--db", url, "--json")
    assert json.loads(out)["database"] == shown_url and SECRET not in out + err

    with caplog.at_level(logging.INFO, logger="stator"):
        code, out, err = run_cli(capsys, "run", app, "--db", url, "--until-idle",
                                 "--idle-window", "0")
    assert code == 0, err
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert f"on {shown_url}" in logged  # the worker's start line names its database
    assert SECRET not in logged + out + err

    stator = Stator(url, [tenant_app.Job])
    try:
        page = TestClient(create_app(stator), base_url="http://localhost").get("/")
    finally:
        stator.dispose()
    assert page.status_code == 200
    footer = page.text[page.text.index("<footer"):]
    assert shown_url.replace("&", "&amp;") in footer
    assert SECRET not in page.text


def test_the_launchers_keys_state_file_and_logs_hide_the_secrets(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A launcher running one database given with its secrets (``--db``): its key, the state
    file, ``launcher-status``, its own log lines, its scheduler's log file and that file's
    name show none of them -- and the scheduler still reached its database."""
    shutil.copy(tenant_app.__file__, tmp_path / "tenant_app.py")
    url = with_secrets(backend.replace("stator.db", "tenant.db"))
    tenant = tenant_app.stator.with_db(url)
    try:
        tenant.migrate()
        with tenant.engine.begin() as conn:
            conn.execute(jobs.insert(), [{"id": i} for i in range(1, 4)])
    finally:
        tenant.dispose()
    launcher = Launcher(LauncherOptions(
        app="tenant_app:stator", databases=[url], max_workers=2, cwd=tmp_path,
        discover_every=0.3, poll_every=0.1, idle_window=0.2, stop_grace=10,
    ), tenant_app.stator.models)
    place = Place(tmp_path / ".stator-launcher")

    def databases() -> list[dict[str, Any]]:
        return list((place.read_state() or {"databases": []})["databases"])

    thread = threading.Thread(target=launcher.run, daemon=True)
    with caplog.at_level(logging.INFO, logger="stator.launcher"):
        thread.start()
        try:
            wait_until(lambda: any(db["last_exit"] == "scheduler idle" for db in databases()), 60,
                       "the scheduler to finish its work and go idle",
                       lambda: json.dumps(place.read_state(), indent=1))
            report = status_report(tmp_path / ".stator-launcher")
        finally:
            launcher.stop()
            thread.join(60)
    [db] = databases()
    assert db["database"] == shown(url) and "password=***" in db["database"]
    assert SECRET not in place.state_path.read_text()
    render(report, Console())  # `stator launcher-status`
    shown_status = capsys.readouterr().out
    assert "password=***" in shown_status
    assert SECRET not in json.dumps(report) + shown_status
    logs = list(place.logs.iterdir())
    assert len(logs) == 1 and SECRET not in logs[0].name
    scheduler_output = logs[0].read_text()
    assert "rows processed" in scheduler_output  # it ran against its database
    assert SECRET not in scheduler_output
    assert SECRET not in "\n".join(r.getMessage() for r in caplog.records)
    assert SECRET not in "".join(capsys.readouterr())


# -- never on a command line ------------------------------------------------------------------


def test_bench_workers_get_their_url_in_the_environment_not_on_argv(tmp_path: Path) -> None:
    from stator._bench._child import Child, ChildSpec
    from stator._bench._models import BenchRow

    url = f"sqlite:///{tmp_path / 'bench.db'}?password={SECRET}"
    stator = Stator(url, [BenchRow])
    stator.migrate()
    stator.dispose()
    child = Child(ChildSpec(url=url, mode="idle", models=["BenchRow"], seconds=0.1,
                            settle=0.0), tmp_path)
    try:
        child.expect("ready", timeout=60)  # it got its database
        cmdline = Path(f"/proc/{child.proc.pid}/cmdline").read_bytes()
        assert b"stator._bench._child" in cmdline and SECRET.encode() not in cmdline
        assert all(SECRET not in arg for arg in child.proc.args)  # type: ignore[union-attr]
    finally:
        child.kill()
