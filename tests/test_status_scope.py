"""Two applications sharing one database (and Stator's tables): each one's ``status`` shows
its own models' errors and workers, never the other's."""

from __future__ import annotations

import json
import os
from typing import Any

from sqlalchemy import insert

from stator import State, StateGraph
from stator._store import Heartbeat, _schema


class Steps(StateGraph):
    new = State()
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        return cls.done


def record_error(stator: Any, model: str, message: str) -> None:
    with stator.engine.begin() as conn:
        conn.execute(insert(_schema.errors_table).values(
            model=model, row_pk="1", state="new", attempt=1, kind="error", message=message,
            traceback="", created_at=stator.clock.now(), worker_id="w",
        ))


def test_status_shows_only_this_apps_errors_and_workers(
    backend, clock, build_models, make_stator
):
    mine = make_stator(backend, [build_models(Steps, table="mine").Order], clock)
    theirs = make_stator(backend, [build_models(Steps, table="theirs").Order], clock)
    now = clock.now()
    for stator, name, worker in ((mine, "mine", "w-mine"), (theirs, "theirs", "w-theirs")):
        record_error(stator, name, f"{name} failed")
        stator.store.heartbeat(Heartbeat(worker, now, now, 4, (name,), {}, os.getpid()))

    report = mine.status()
    assert [e["message"] for e in report["errors"]] == ["mine failed"]
    assert [w["id"] for w in report["workers"]] == ["w-mine"]
    other = theirs.status()
    assert [e["message"] for e in other["errors"]] == ["theirs failed"]
    assert [w["id"] for w in other["workers"]] == ["w-theirs"]
    json.dumps(report, default=str)  # what `status --json` prints
