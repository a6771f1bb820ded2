"""``stator bench``: every scenario runs, at its smallest, on both backends, and says what the
issue asks for.

Structure and sanity only (the figures are there, complete, positive); how fast anything was
is never asserted here — that is what ``benchmarks/RESULTS.md`` is for.
"""

from __future__ import annotations

import itertools
import json
import secrets
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from sqlalchemy import make_url, text

from stator._bench import SCENARIOS, Sizes, _places, run_bench
from stator.cli import cli

COMMON = {"scenario", "backend", "load_1m"}
EXPECTED = {
    "throughput": {"processes", "objects", "transitions", "complete", "seconds",
                   "transitions_per_second",
                   "worker_cpu_s_per_1000", "db_cpu_s_per_1000", "peak_rss_mb", "runs"},
    "limit": {"batch_size", "transitions", "complete", "transitions_per_second", "claim_ms",
              "write_ms", "runs"},
    "latency": {"mode", "samples", "p50_ms", "p95_ms", "p99_ms", "max_ms"},
    "scale": {"table_rows", "due_rows", "transitions", "complete", "transitions_per_second",
              "claim_ms", "vs_smallest"},
    "idle": {"seconds", "worker_cpu_percent", "queries_per_second", "db_transactions_per_second",
             "db_cpu_percent"},
    "memory": {"transitions", "samples", "rss_first_mb", "rss_last_mb", "rss_max_mb",
               "growth_mb", "flat", "rss_series"},
    "fanout": {"parents", "children_per_parent", "complete", "parents_per_second",
               "rows_created_per_second", "rows_processed_per_second"},
    "limits": {"graph", "measure", "rows", "keys", "limit"},
    "django": {"rows", "concurrency", "django_transitions_per_second",
               "sqlalchemy_transitions_per_second", "django_to_sqlalchemy",
               "django_worker_cpu_s_per_1000", "complete"},
}


@pytest.fixture
def bench_db(backend: str) -> str | None:
    """None for SQLite (the bench makes its own files); for PostgreSQL the URL of the test
    session's database, where the bench makes (and drops) databases of its own."""
    if backend.startswith("sqlite"):
        return None
    return make_url(backend).set(query={}).render_as_string(hide_password=False)


def by_scenario(lines: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        found.setdefault(line["scenario"], []).append(line)
    return found


def bench_databases(url: str) -> list[str]:
    parsed = make_url(url)
    with psycopg.connect(host=parsed.host, port=parsed.port or 5432, user=parsed.username,
                         dbname=parsed.database, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'stator_bench_%'"
        ).fetchall()
    return [name for (name,) in rows]


def test_every_scenario_runs_and_reports(
    bench_db: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This run's throwaway databases carry a token of the test's own, so that another
    # benchmark on the same server (a developer's, another suite's) does not count as ours.
    mine = f"t{secrets.token_hex(3)}"
    counter = itertools.count()
    monkeypatch.setattr(_places.secrets, "token_hex", lambda _n: f"{mine}{next(counter)}")
    lines = list(run_bench(bench_db, sizes=Sizes.tiny()))
    backend = "sqlite" if bench_db is None else "postgresql"
    found = by_scenario(lines)
    assert list(found) == list(SCENARIOS)
    for scenario, results in found.items():
        for line in results:
            assert set(line) >= COMMON | EXPECTED[scenario], scenario
            assert line["backend"] == backend
            json.dumps(line)  # one JSON object per line, as --json prints them
            assert line.get("complete", True), line
    check_throughput(found["throughput"], postgres=bench_db is not None)
    check_limit(found["limit"])
    check_latency(found["latency"])
    check_scale(found["scale"])
    check_idle(found["idle"][0], postgres=bench_db is not None)
    check_memory(found["memory"][0])
    check_fanout(found["fanout"][0])
    check_limits(found["limits"])
    check_django(found["django"][0])
    if bench_db:  # every throwaway database dropped
        assert [d for d in bench_databases(bench_db) if d.startswith(f"stator_bench_{mine}")] == []


def check_throughput(lines: list[dict[str, Any]], postgres: bool) -> None:
    (line,) = lines
    assert line["processes"] == 1 and line["objects"] == "orm"
    assert line["transitions"] == line["rows"] * 3
    assert line["transitions_per_second"] > 0
    assert line["worker_cpu_s_per_1000"] > 0
    assert line["peak_rss_mb"] > 0
    if postgres:
        assert line["db_cpu_s_per_1000"] is not None and line["db_cpu_s_per_1000"] >= 0
    else:
        assert line["db_cpu_s_per_1000"] is None  # in-process: the worker's CPU


def check_limit(lines: list[dict[str, Any]]) -> None:
    # The minimal loop (the floor) first, then Stator's own statements; both complete.
    assert [line["loop"] for line in lines] == ["minimal", "stator-sql"]
    for line in lines:
        assert line["batch_size"] == 100
        assert line["complete"]
        assert line["transitions_per_second"] > 0
        assert line["claim_ms"] > 0 and line["write_ms"] > 0
        assert line["engine_transitions_per_second"] > 0
        assert line["engine_vs_limit"] > 0


def check_latency(lines: list[dict[str, Any]]) -> None:
    assert [line["mode"] for line in lines] == ["same-process", "cross-process"]
    for line in lines:
        assert line["samples"] == Sizes.tiny().latency_samples
        assert line["p50_ms"] <= line["p95_ms"] <= line["p99_ms"] <= line["max_ms"]
        assert line["max_ms"] > 0


def check_scale(lines: list[dict[str, Any]]) -> None:
    assert [line["table_rows"] for line in lines] == list(Sizes.tiny().scale_sizes)
    for line in lines:
        assert line["transitions"] == line["due_rows"] * 3
        assert line["claim_ms"] > 0 and line["vs_smallest"] > 0
    assert lines[0]["vs_smallest"] == 1.0


def check_idle(line: dict[str, Any], postgres: bool) -> None:
    assert line["seconds"] > 0
    assert line["worker_cpu_percent"] >= 0
    assert line["queries_per_second"] >= 0
    if postgres:
        assert line["db_transactions_per_second"] is not None
        assert line["data_version_checks_per_second"] is None
    else:
        assert line["db_transactions_per_second"] is None
        assert line["data_version_checks_per_second"] > 0


def check_memory(line: dict[str, Any]) -> None:
    assert line["transitions"] >= Sizes.tiny().memory_transitions
    assert line["samples"] > 0 and line["rss_series"]
    assert 0 < line["rss_first_mb"] <= line["rss_max_mb"]
    assert isinstance(line["flat"], bool)


def check_fanout(line: dict[str, Any]) -> None:
    assert line["children_per_parent"] == Sizes.tiny().fanout_children
    assert line["rows_created_per_second"] > 0
    assert line["rows_processed_per_second"] > line["rows_created_per_second"]


def check_limits(lines: list[dict[str, Any]]) -> None:
    """The same graph with and without a limit per key, throughput and claim cost each."""
    shapes = {(line["graph"], line["measure"]) for line in lines}
    assert shapes == {(g, m) for g in ("unlimited", "limited") for m in ("throughput", "claim")}
    for line in lines:
        if line["measure"] == "throughput":
            assert line["complete"] and line["transitions_per_second"] > 0
        else:
            assert 0 < line["claimed"] <= line["rows"] and line["claim_ms"] > 0


def test_plain_rows_are_measured_beside_orm_rows(bench_db: str | None) -> None:
    """``--plain-rows``: throughput runs both kinds in turn; so does the Django store."""
    found = by_scenario(list(run_bench(
        bench_db, ["throughput", "django"], Sizes.tiny(), plain_rows=True)))
    assert [line["objects"] for line in found["throughput"]] == ["orm", "plain"]
    for line in found["throughput"]:
        assert line["complete"] and line["transitions"] == line["rows"] * 3
        assert line["transitions_per_second"] > 0 and line["worker_cpu_s_per_1000"] > 0
    (django,) = found["django"]
    assert django["complete"]  # the ORM rows' drain and the plain rows' alike
    assert django["django_plain_transitions_per_second"] > 0
    assert django["django_plain_worker_cpu_s_per_1000"] > 0


def test_cli_shows_orm_and_plain_rows_side_by_side() -> None:
    args = ["bench", "--scenario", "throughput", "--rows", "100", "--processes", "1",
            "--plain-rows"]
    human = CliRunner().invoke(cli, args)
    assert human.exit_code == 0, human.output
    assert "orm rows, processes 1" in human.stdout
    assert "plain rows, processes 1" in human.stdout


def test_cli_prints_json_lines_and_tables(tmp_path: Any) -> None:
    runner = CliRunner()
    args = ["bench", "--scenario", "limit", "--quick", "--rows", "100"]
    as_json = runner.invoke(cli, [*args, "--json"])
    assert as_json.exit_code == 0, as_json.output
    lines = [json.loads(line) for line in as_json.stdout.splitlines() if line.startswith("{")]
    # The limit scenario measures the engine too when throughput was not run, for its ratio.
    assert [line["scenario"] for line in lines] == ["throughput"] + ["limit"] * 4
    human = runner.invoke(cli, args)
    assert human.exit_code == 0, human.output
    assert "stator bench: limit (sqlite)" in human.stdout
    assert "minimal," in human.stdout and "stator-sql," in human.stdout


@pytest.mark.parametrize("args", [
    ["--scenario", "nope"],
    ["--processes", "1,x"],
    ["--db", "sqlite:///somewhere.db"],
])
def test_cli_rejects_bad_options(args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["bench", *args])
    assert result.exit_code == 2


def check_django(line: dict[str, Any]) -> None:
    assert line["rows"] == Sizes.tiny().rows
    assert line["complete"]  # every row made its three transitions through the Django store
    assert line["django_transitions_per_second"] > 0
    assert line["sqlalchemy_transitions_per_second"] > 0
    assert line["django_to_sqlalchemy"] == pytest.approx(
        line["django_transitions_per_second"] / line["sqlalchemy_transitions_per_second"],
        rel=0.01,
    )


def test_the_latency_scenarios_application_waits_out_a_held_write_lock(tmp_path: Any) -> None:
    """On a loaded machine the worker's write can hold SQLite's lock for tens of
    milliseconds; the application side pauses between tries instead of spending them all
    inside the lock (stop 29's CI: "row 2 could not be moved in 20 attempts")."""
    import sqlite3
    import threading
    import time

    from stator import Stator
    from stator._bench._latency import _move
    from stator._bench._models import LatencyRow
    from stator._bench._places import insert_rows

    path = tmp_path / "latency.sqlite3"
    stator = Stator(f"sqlite:///{path}", [LatencyRow])
    try:
        stator.migrate()
        insert_rows(stator.engine, LatencyRow.__tablename__, 1, 1)
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        released = threading.Timer(0.3, holder.execute, ("COMMIT",))
        released.start()
        try:
            assert _move(stator, 1) > time.time() - 5
        finally:
            released.join()
            holder.close()
        with stator.engine.connect() as conn:
            table = LatencyRow.__tablename__
            assert conn.execute(text(f"SELECT state FROM {table}")).scalar() == "go"
    finally:
        stator.dispose()
