"""``StatorSchedule``: a Django view of ``stator_schedules``, run by the engine.

The table is Stator's own (schema version 4, made by the same versioned schema code as
``stator migrate``), so the model is unmanaged; its handler fires the row's schedule in the
handler's ``transaction.atomic`` block (see ``stator._schedules``): a task enqueued through
the Stator task backend, a row created, rows moved, all committed with the fenced write that
moves the row's next tick on.

Settings::

    STATOR = {"SCHEDULE": {
        "nightly-cleanup": {"task": "shop.tasks.cleanup", "cron": "30 3 * * 1-5",
                            "timezone": "Europe/Paris"},
        "hourly-report": {"insert": "shop.Report", "values": {"kind": "hourly"},
                          "cron": "0 * * * *"},
        "retry-stuck": {"move": "shop.Order", "to": "new", "filter": {"state": "stuck"},
                        "every": 300},
    }}

Without a ``SCHEDULE`` key Stator leaves the table alone (and workers do not run it).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.db import models

from .._clock import handler_now
from .._schedule_graph import ScheduleStates, fire
from ..errors import ConfigError
from ._settings import stator_settings
from ._stator_model import StatorModel
from .fields import StatorDateTimeField

if TYPE_CHECKING:  # parsed only when STATOR["SCHEDULE"] declares some (see _schedule_graph)
    from .._schedule import Schedule


class StatorSchedule(StatorModel):
    """One periodic schedule: its recorded definition, its ticks and what it last did."""

    state_graph = ScheduleStates

    name = models.CharField(primary_key=True, max_length=200)
    kind = models.CharField(max_length=16)
    definition = models.TextField()
    digest = models.CharField(max_length=64)
    next_tick = StatorDateTimeField(null=True, blank=True)
    last_tick = StatorDateTimeField(null=True, blank=True)
    last_fired_at = StatorDateTimeField(null=True, blank=True)
    last_outcome = models.TextField(null=True, blank=True)
    fired = models.IntegerField(default=0)
    missed = models.IntegerField(default=0)
    updated_at = StatorDateTimeField()

    class Meta:
        app_label = "stator"
        db_table = "stator_schedules"
        managed = False
        verbose_name = "schedule"
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name

    def stator_fire(self) -> None:
        fire(self, _OrmActions(self._state.db or stator_settings()["DATABASE"]))


def declared_schedules() -> list[Schedule] | None:
    """``STATOR["SCHEDULE"]``, checked (None when the key is absent)."""
    declared = stator_settings().get("SCHEDULE")
    if declared is None:
        return None
    if not isinstance(declared, dict):
        raise ConfigError("settings.STATOR['SCHEDULE'] is a dict of schedules by name")
    from .._schedule import parse

    found = []
    for name, raw in declared.items():
        schedule = parse(name, raw, _model_label)
        if schedule.kind == "move":
            graph = getattr(apps.get_model(schedule.target), "state_graph", None)
            if graph is None or schedule.to not in graph.states:
                raise ConfigError(f"schedule {name!r}: {schedule.to!r} is not a state of "
                                  f"{schedule.target}'s graph")
        found.append(schedule)
    return found


def _model_label(given: Any) -> str:
    if isinstance(given, type) and hasattr(given, "_meta"):
        return str(given._meta.label_lower)
    try:
        return str(apps.get_model(given)._meta.label_lower)
    except (LookupError, ValueError, TypeError):
        raise ConfigError(f"{given!r} is not an installed model ('app_label.ModelName')") from None


# Models by label, as the Stators built in this process run them: looked up before the app
# registry, so a schedule may name a Stator model that is not in an installed app's registry.
KNOWN_MODELS: dict[str, type] = {}


def remember(models: list[type]) -> None:
    for model in models:
        KNOWN_MODELS[model._meta.label_lower] = model  # type: ignore[attr-defined]


def _model(label: str) -> Any:
    return KNOWN_MODELS.get(label) or apps.get_model(label)


class _OrmActions:
    def __init__(self, alias: str) -> None:
        self.alias = alias

    def run(self, schedule: Schedule, tick: datetime) -> str:
        if schedule.kind == "task":
            from .tasks import load_task  # Django >= 6.0 (django.tasks)

            task = load_task(schedule.target).using(
                queue_name=schedule.queue, priority=schedule.priority,
                backend=schedule.backend, run_after=tick,
            )
            result = task.enqueue(*schedule.args, **schedule.kwargs)
            return f"enqueued task {result.id}"
        model: Any = _model(schedule.target)
        if schedule.kind == "insert":
            model.objects.using(self.alias).create(**schedule.values)
            return f"inserted a {schedule.target} row"
        moved = model.objects.using(self.alias).filter(**schedule.filter).transition_perform(
            schedule.to, clock=_HandlerClock())
        return f"moved {moved} {schedule.target} row(s) to {schedule.to}"

    def record(self, row: Any, values: dict[str, Any]) -> None:
        type(row).objects.using(self.alias).filter(pk=row.pk).update(**values)
        for key, value in values.items():
            setattr(row, key, value)


class _HandlerClock:
    """The handler's clock, for the moves a schedule makes."""

    def now(self) -> datetime:
        return handler_now()
