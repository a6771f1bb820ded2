"""The conformance suite's fixture: ``rig``, once per driver and database (``driver_rig``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connections
from driver_rig import COMBINATIONS, PG_LOCK_TIMEOUT, Rig

import djangosetup
from pgserver import _pg_url
from stator import ManualClock


@pytest.fixture(params=COMBINATIONS)
def rig(request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Path) -> Iterator[Rig]:
    kind, database = request.param.split("-")
    pg_database = pg_options = sqlite_file = ""
    if database == "postgresql":
        pg_database = request.getfixturevalue("pg_database")
        schema = djangosetup.new_schema(request.getfixturevalue("pg_admin"))
        pg_options = f"-csearch_path={schema} {PG_LOCK_TIMEOUT}"
    else:
        sqlite_file = str(tmp_path / f"{kind}.db")
    if kind == "django":
        blocker = request.getfixturevalue("django_db_blocker")
        with djangosetup.database_alias(
            "driver_suite", tmp_path, blocker, pg_database or None, pg_options,
        ) as alias:
            if sqlite_file:
                sqlite_file = str(connections[alias].settings_dict["NAME"])
            made = Rig(kind, database, alias, clock, pg_options, pg_database, sqlite_file)
            try:
                yield made
            finally:
                made.close()
        return
    if database == "postgresql":
        url = _pg_url(pg_database).update_query_dict({"options": pg_options})
        target = url.render_as_string(hide_password=False)
    else:
        target = f"sqlite:///{sqlite_file}"
    made = Rig(kind, database, target, clock, pg_options, pg_database, sqlite_file)
    try:
        yield made
    finally:
        made.close()
