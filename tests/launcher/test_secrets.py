"""The launcher's trust boundary: a database's name cannot send a scheduler elsewhere, and a
password never shows on a command line.

Whoever may create databases on a server chooses their names; the operator chooses the
``--discover`` URL and its password.  A name such as ``t?host=127.0.0.1&port=5999`` once
became a query string when the scheduler's URL was rendered to text and parsed again: the
scheduler connected to port 5999 and sent the password there.  A fake PostgreSQL server (it
asks for a clear-text password and writes down what it gets) stands in for the attacker.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import URL

from pgserver import PG_ADMIN_URL
from stator._launcher import _discovery
from stator._launcher._children import SchedulerCommand, spawn, url_from_parts, url_parts
from stator._launcher._discovery import discover_source, name_problem
from stator._launcher._place import Place
from stator._launcher._supervisor import Launcher, LauncherOptions

from . import tenant_app
from .conftest import PgTenants, wait_until

SECRET = "S3cr3t-PW"
SSL_REQUEST, GSS_REQUEST = 80877103, 80877104


class FakePostgres:
    """A listener on a free port that speaks just enough of PostgreSQL's protocol to be sent
    a password: each connection's startup parameters and password are recorded; the
    connection is then held until ``release``."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.connections: list[dict[str, str]] = []
        self.release = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            with conn:
                seen: dict[str, str] = {}
                self.connections.append(seen)
                with contextlib.suppress(OSError, struct.error):
                    self._talk(conn, seen)
                    self.release.wait(60)

    def _talk(self, conn: socket.socket, seen: dict[str, str]) -> None:
        conn.settimeout(30)
        while True:
            body = _read_exactly(conn, struct.unpack("!i", _read_exactly(conn, 4))[0] - 4)
            (code,) = struct.unpack("!i", body[:4])
            if code not in (SSL_REQUEST, GSS_REQUEST):
                break
            conn.sendall(b"N")  # no encryption: go on in clear
        fields = body[4:].split(b"\0")  # name, value, ..., "", ""
        pairs = zip(fields[::2], fields[1::2], strict=False)
        seen.update({k.decode(): v.decode() for k, v in pairs if k})
        conn.sendall(b"R" + struct.pack("!ii", 8, 3))  # AuthenticationCleartextPassword
        kind = _read_exactly(conn, 1)
        length = struct.unpack("!i", _read_exactly(conn, 4))[0]
        if kind == b"p":
            seen["password"] = _read_exactly(conn, length - 4).rstrip(b"\0").decode()

    def close(self) -> None:
        self.release.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.sock.close()
        self._thread.join(10)


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


@pytest.fixture
def fake_postgres() -> Iterator[FakePostgres]:
    server = FakePostgres()
    try:
        yield server
    finally:
        server.close()


def an_app(directory: Path) -> SchedulerCommand:
    shutil.copy(tenant_app.__file__, directory / "tenant_app.py")
    return SchedulerCommand(app="tenant_app:stator", idle_window=0.1, concurrency=None,
                            log_level="INFO", cwd=directory)


# -- how a scheduler gets its database --------------------------------------------------------


def test_a_scheduler_gets_its_url_by_parts_in_its_environment_never_on_argv(
    tmp_path: Path, fake_postgres: FakePostgres
) -> None:
    """The real scheduler command, given a database whose name is a query string: it reaches
    the server it was given, asking for that very name, with the password -- and its command
    line, as ``ps`` shows it, holds no password."""
    odd = "tenant_x?host=127.0.0.2&port=1&sslmode=disable"
    url = URL.create("postgresql+psycopg", username="someone", password=SECRET,
                     host="127.0.0.1", port=fake_postgres.port, database=odd)
    ended = threading.Event()
    log = tmp_path / "scheduler.log"
    child = spawn(an_app(tmp_path), "key", url, None, log, ended.set)
    try:
        wait_until(lambda: any("password" in c for c in fake_postgres.connections)
                   or child.popen.poll() is not None,
                   60, "the scheduler at the server it was given", log.read_text)
        connected = fake_postgres.connections
        assert connected, log.read_text()  # not gone to the host and port in its name
        assert connected[0]["database"] == odd  # the name stayed a name
        assert connected[0]["password"] == SECRET  # it did get the password: by environment
        cmdline = Path(f"/proc/{child.pid}/cmdline").read_bytes()
        assert b"launcher-scheduler" in cmdline  # still the scheduler, still running
        assert SECRET.encode() not in cmdline
        assert all(SECRET not in arg for arg in child.popen.args)  # type: ignore[union-attr]
        fake_postgres.release.set()
        assert child.popen.wait(60) == 1  # the fake server hung up: a database error
    finally:
        if child.popen.poll() is None:
            child.popen.kill()
            child.popen.wait()
    assert SECRET not in log.read_text()


@pytest.mark.parametrize("url", [
    URL.create("postgresql+psycopg", username="u", password="p@ss:w/rd?&=", host="h",
               port=5433, database="t?host=evil&port=5999",
               query={"sslmode": "require", "options": ["-ca=1", "-cb=2"]}),
    URL.create("sqlite", database="/tmp/tenants/a?mode=ro#x.db"),
])
def test_url_parts_come_back_as_the_same_url(url: URL) -> None:
    assert url_from_parts(url_parts(url)) == url


# -- which names the launcher runs ------------------------------------------------------------


def test_only_names_of_letters_digits_and_a_few_marks_are_launched() -> None:
    for name in ("tenant_1", "Kunde-ä.2", "a$b", "日本"):
        assert name_problem(name) is None, name
    for name in ("t?host=x", "t&port=1", "t/x", "t@h", "t:1", "t%3F", "t#x", "t x", "t\nx",
                 "t\\x", "t=1", "t;x", "t+x", "t'x", 't"x'):
        assert name_problem(name) is not None, name


def test_server_names_with_url_syntax_are_skipped_and_said_once(
    pg_tenants: PgTenants, caplog: pytest.LogCaptureFixture
) -> None:
    good = pg_tenants.create("good")
    pg_tenants.create("x?host=127.0.0.1&port=5999&sslmode=disable")
    source = discover_source(pg_tenants.pattern)
    with caplog.at_level(logging.WARNING, logger="stator.launcher"):
        first, second = source.scan(), source.scan()
    assert [t.url.database for t in first.values()] == [good.rsplit("/", 1)[-1]]
    assert second == first
    warnings = [r.getMessage() for r in caplog.records if "skipping database" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "'?'" in warnings[0] and "rename it" in warnings[0]


# -- the whole launcher against a real server -------------------------------------------------


def _database_named(fake: FakePostgres, pg_tenants: PgTenants) -> str:
    return f"{pg_tenants.prefix}x?host=127.0.0.1&port={fake.port}&sslmode=disable"


@pytest.mark.parametrize("names", ["refused", "admitted"])
def test_a_database_name_never_sends_a_scheduler_or_its_password_elsewhere(
    names: str, tmp_path: Path, pg_tenants: PgTenants, fake_postgres: FakePostgres,
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As shipped the name is refused; with the refusal switched off ("admitted") the
    scheduler still goes to the database of that name on the real server, finds no schema
    and stops.  Either way the fake server never hears from anyone."""
    if names == "admitted":
        monkeypatch.setattr(_discovery, "name_problem", lambda name: None)
    name = _database_named(fake_postgres, pg_tenants)
    pg_tenants.admin.execute(f'CREATE DATABASE "{name}"')
    pg_tenants.made.append(name)
    pattern = PG_ADMIN_URL.set(drivername="postgresql", password=SECRET,
                               database=f"{pg_tenants.prefix}*")
    shutil.copy(tenant_app.__file__, tmp_path / "tenant_app.py")
    launcher = Launcher(LauncherOptions(
        app="tenant_app:stator", discover=[pattern.render_as_string(hide_password=False)],
        max_workers=3, cwd=tmp_path, discover_every=0.3, poll_every=0.1, idle_window=0.2,
        stop_grace=10, backoff_floor=0.3, backoff_max=1,
    ), tenant_app.stator.models)
    place = Place(tmp_path / ".stator-launcher")

    def ours() -> list[dict[str, Any]]:
        state = place.read_state() or {"databases": []}
        return [db for db in state["databases"] if "x?host" in db["database"]]

    def done() -> bool:  # it was skipped, or its scheduler ran and ended
        return (any("skipping database" in r.getMessage() for r in caplog.records)
                or any(db["last_exit"] for db in ours()))

    thread = threading.Thread(target=launcher.run, daemon=True)
    with caplog.at_level(logging.INFO, logger="stator.launcher"):
        thread.start()
        try:
            wait_until(done, 60, f"the launcher to deal with {name!r}",
                       lambda: "\n".join(r.getMessage() for r in caplog.records))
        finally:
            launcher.stop()
            thread.join(60)
    assert fake_postgres.connections == [], "a scheduler went to the name's host and port"
    if names == "refused":
        assert ours() == []
    else:
        assert ours()[0]["state"] == "disabled"  # the real database of that name: no schema
        assert "no Stator tables" in ours()[0]["last_error"]
