"""Periodic schedules run by the engine: each schedule is a row of ``stator_schedules``.

A schedule's ``state_next`` is its next tick.  A worker claims the row when the tick is due,
under a lease like any row; its handler (``fire``) runs the schedule's action for the ticks
its missed-tick policy fires (enqueue a task, insert a row, move rows) and writes the row's
next tick, and all of it commits in one transaction with the engine's fenced write: a worker
whose lease ran out meanwhile has its write refused and its actions rolled back with it.  So
each tick fires once, whatever the number of workers and hosts, with no lock table and no
"beat" process.

The schedules follow the code: ``sync`` (at a worker's start) inserts the declared ones,
rewrites a row whose definition changed (its digest differs) and disables the rows no longer
declared (their history stays).  A worker fires the definition its row records, not its own
copy: two versions of the code side by side during a deploy share the one row.

``ScheduleStates``, the graph, and ``fire``, its handler, are in ``_schedule_graph``
(Django's app loading imports them without SQLAlchemy); the SQLAlchemy model is made per ``Stator``
(``schedule_model``, which knows the Stator's models), Django's is ``StatorSchedule``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import Connection, Engine, select
from sqlalchemy.exc import IntegrityError

from ._clock import handler_now
from ._schedule_graph import ScheduleStates as ScheduleStates
from ._schedule_graph import fire
from ._store._operations import WRITE
from ._store._schema import schedules_table
from .errors import ConfigError

if TYPE_CHECKING:  # the ORM is the SQLAlchemy integration's, imported where it runs
    from sqlalchemy.orm import Session

    from ._schedule import Schedule  # imported where a schedule is parsed (_schedule_graph)

# -- following the code --------------------------------------------------------------------


def sync(engine: Engine, schedules: Sequence[Schedule] | None, now: datetime) -> list[str]:
    """Make the table say what the code declares (see the module docstring); returns what
    changed.  One transaction; a row's write is conditional on what was read, so two workers
    starting together write each change once.  None declared: the table is left alone."""
    if schedules is None:
        return []
    try:
        return _sync(engine, schedules, now)
    except IntegrityError:  # another worker added the same schedule first: read it again
        return _sync(engine, schedules, now)


def _sync(engine: Engine, schedules: Sequence[Schedule], now: datetime) -> list[str]:
    declared = {s.name: s for s in schedules}
    done: list[str] = []
    t = schedules_table
    with engine.connect().execution_options(**WRITE) as conn, conn.begin():
        rows = {r.name: r for r in conn.execute(select(t.c.name, t.c.digest, t.c.state))}
        for name, schedule in declared.items():
            row = rows.get(name)
            if row is None:
                _insert(conn, schedule, now)
                done.append(f"schedule {name}: added, next tick {_next(schedule, now)}")
            elif row.digest != schedule.digest or row.state == "disabled":
                _rewrite(conn, schedule, row, now)
                done.append(f"schedule {name}: definition changed, next tick "
                            f"{_next(schedule, now)}" if row.digest != schedule.digest
                            else f"schedule {name}: declared again, active")
        for name, row in rows.items():
            if name not in declared and row.state != "disabled":
                conn.execute(t.update().where(t.c.name == name, t.c.state == row.state).values(
                    state="disabled", state_changed=now, state_next=None, state_attempts=0))
                done.append(f"schedule {name}: no longer declared, disabled")
    return done


def _next(schedule: Schedule, now: datetime) -> str:
    from ._schedule import next_tick

    return next_tick(schedule, now).isoformat()


def _insert(conn: Connection, schedule: Schedule, now: datetime) -> None:
    from ._schedule import next_tick

    tick = next_tick(schedule, now)
    conn.execute(schedules_table.insert().values(
        name=schedule.name, kind=schedule.kind, definition=schedule.definition_text,
        digest=schedule.digest, next_tick=tick, fired=0, missed=0, updated_at=now,
        state="active", state_changed=now, state_next=tick, state_attempts=0,
    ))


def _rewrite(conn: Connection, schedule: Schedule, row: Any, now: datetime) -> None:
    """A changed definition runs from its next tick after now; the row's history stays.  A
    worker holding the row meanwhile loses its lease (``state_next`` changes): its firing,
    by the old definition, is rolled back."""
    from ._schedule import next_tick

    t = schedules_table
    tick = next_tick(schedule, now)
    values: dict[str, Any] = {
        "kind": schedule.kind, "definition": schedule.definition_text,
        "digest": schedule.digest, "updated_at": now, "next_tick": tick,
    }
    if row.state == "disabled":
        values.update(state="active", state_changed=now, state_attempts=0)
    if row.state != "paused":
        values["state_next"] = tick
    conn.execute(t.update().where(
        t.c.name == schedule.name, t.c.digest == row.digest, t.c.state == row.state,
    ).values(**values))


# -- the SQLAlchemy integration --------------------------------------------------------------


class ScheduleRowBase:
    """A row of ``stator_schedules`` for a SQLAlchemy ``Stator``; ``stator_models`` are that
    Stator's models by table name (what ``insert`` and ``move`` name)."""

    state_graph = ScheduleStates
    stator_models: ClassVar[dict[str, type]] = {}
    name: str
    definition: str
    next_tick: datetime | None
    fired: int
    missed: int

    def stator_fire(self) -> None:
        from sqlalchemy.orm import Session

        session = Session.object_session(self)
        assert session is not None  # the handler's session holds the claimed row
        fire(self, _SessionActions(session, self.stator_models))


def schedule_model(models: Sequence[type]) -> type:
    """A model class over ``stator_schedules`` for one Stator (each has its own mapping)."""
    from sqlalchemy.orm import registry

    by_name = {model.__table__.name: model for model in models}  # type: ignore[attr-defined]
    cls = type("ScheduleRow", (ScheduleRowBase,), {"stator_models": by_name})
    registry().map_imperatively(cls, schedules_table)
    return cls


def with_schedule_model(models: list[type], schedules: list[Schedule] | None) -> list[type]:
    """The models a SQLAlchemy Stator runs: with a schedule model if it declares schedules."""
    return models if schedules is None else [*models, schedule_model(models)]


def model_namer(models: Sequence[type]) -> Callable[[Any], str]:
    """What a SQLAlchemy schedule's ``insert``/``move`` names (a model, its class name or its
    table name) as the table name the row records."""
    tables = {model.__table__.name: model for model in models}  # type: ignore[attr-defined]
    classes = {model.__name__: model for model in models}

    def name(given: Any) -> str:
        if isinstance(given, type) and given in tables.values():
            return str(given.__table__.name)  # type: ignore[attr-defined]
        if isinstance(given, str) and given in tables:
            return given
        if isinstance(given, str) and given in classes:
            return str(classes[given].__table__.name)  # type: ignore[attr-defined]
        known = ", ".join(sorted(tables))
        raise ConfigError(f"{given!r} is not one of this Stator's models ({known})")

    return name


def parse_for_models(
    declared: dict[str, dict[str, Any]] | None, models: list[type]
) -> list[Schedule] | None:
    """The SQLAlchemy schedules, checked: ``insert``/``move`` name one of ``models``; a
    ``move`` names a state of its graph; ``task`` needs Django."""
    if declared is None:
        return None
    from ._schedule import parse

    if not isinstance(declared, dict):
        raise ConfigError("schedules is a dict: {name: {'insert': Model, 'every': 60}, ...}")
    namer = model_namer(models)
    graphs = {m.__table__.name: m.state_graph for m in models}  # type: ignore[attr-defined]
    found = []
    for name, raw in declared.items():
        schedule = parse(name, raw, namer)
        if schedule.kind == "task":
            raise ConfigError(f"schedule {name!r}: 'task' schedules are Django's "
                              "(STATOR['SCHEDULE']); here use 'insert' or 'move'")
        if schedule.kind == "move" and schedule.to not in graphs[schedule.target].states:
            raise ConfigError(f"schedule {name!r}: {schedule.to!r} is not a state of "
                              f"{graphs[schedule.target].__name__}")
        found.append(schedule)
    return found


class _SessionActions:
    def __init__(self, session: Session, models: Mapping[str, type]) -> None:
        self.session = session
        self.models = models

    def run(self, schedule: Schedule, tick: datetime) -> str:
        model = self.models.get(schedule.target)
        if model is None:
            raise ConfigError(f"schedule {schedule.name!r}: model {schedule.target!r} is not "
                              "run by this Stator")
        if schedule.kind == "insert":
            self.session.add(model(**schedule.values))
            return f"inserted a {schedule.target} row"
        if schedule.kind == "move":
            from ._store import transitions

            where = [getattr(model, column) == value for column, value in schedule.filter.items()]
            moved = transitions.perform_many(self.session, model, schedule.to, where, tick_now())
            return f"moved {moved} {schedule.target} row(s) to {schedule.to}"
        raise ConfigError(f"schedule {schedule.name!r}: a {schedule.kind!r} schedule needs "
                          "Django (stator.django)")

    def record(self, row: Any, values: dict[str, Any]) -> None:
        for key, value in values.items():
            setattr(row, key, value)


def tick_now() -> datetime:
    """The time a schedule's moves are stamped with: the handler's clock."""
    return handler_now()
