"""Finding the project's Stator models and building the engine over them, with its settings
(``_settings``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.apps import apps

from .._clock import Clock
from .._stator import Stator
from .._store._django import DjangoStore
from ._schedule_model import StatorSchedule, declared_schedules, remember
from ._settings import max_hung as max_hung
from ._settings import stator_settings as stator_settings
from ._stator_model import StatorModel, graph_of
from ._task_model import StatorTask
from ._task_options import stator_backends

if TYPE_CHECKING:
    from .._schedule import Schedule


def stator_models(*, every: bool = False) -> list[type]:
    """Every installed concrete ``StatorModel`` with a valid graph (the others fail checks);
    the schedules' only when ``STATOR["SCHEDULE"]`` is set (Stator then manages them), and
    the tasks' only when a Stator task backend is configured (or schedules, which enqueue
    tasks): a project without one has no ``stator_tasks`` in its status, dashboard or
    workers.  ``every``: the tasks' too whatever the settings (the wake-up triggers, so a
    backend configured later needs no new migration)."""
    scheduled = "SCHEDULE" in stator_settings()
    tasks = every or scheduled or bool(stator_backends())
    return [
        m for m in apps.get_models()
        if issubclass(m, StatorModel) and not m._meta.proxy and graph_of(m) is not None
        and (scheduled or m is not StatorSchedule) and (tasks or m is not StatorTask)
    ]


def model_label(model: Any) -> str:
    return str(model._meta.label_lower)


def build_stator(
    *, models: Sequence[type] | None = None, clock: Clock | None = None,
    concurrency: int | None = None, batch_size: int | None = None, alias: str | None = None,
    options: dict[str, Any] | None = None, schedules: list[Schedule] | None = None,
) -> Stator:
    """A ``Stator`` over the project's models (or ``models``), on Django's connections.

    ``options`` go to each model's ``stator_claim_where(options)`` classmethod, if it has
    one: an SQL condition added to its claims (``runstator --queue`` passes
    ``{"queues": [...]}``, or ``{"queues": None}`` for all).  ``schedules``: the checked
    schedules (by default ``STATOR["SCHEDULE"]``'s, when the chosen models include
    ``StatorSchedule``).
    """
    conf = stator_settings()
    chosen = list(stator_models() if models is None else models)
    if schedules is None and StatorSchedule in chosen:
        schedules = declared_schedules()
    remember(chosen)
    store = DjangoStore(alias or conf["DATABASE"], chosen, options, clock=clock)
    return Stator._over_store(
        store, chosen, clock=clock, concurrency=int(concurrency or conf["CONCURRENCY"]),
        batch_size=int(batch_size or conf["BATCH_SIZE"]),
        listen_url=conf.get("LISTEN_URL"),  # PostgreSQL behind a pooler: wake-ups go direct
        schedules=schedules,
    )


def install_schema(alias: str) -> list[str]:
    return DjangoStore(alias, []).migrate()


def uninstall_schema(alias: str) -> list[str]:
    return DjangoStore(alias, []).uninstall()


def install_wakeups(alias: str) -> list[str]:
    return DjangoStore(alias, stator_models(every=True)).migrate()
