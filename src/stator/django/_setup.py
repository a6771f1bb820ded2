"""Finding the project's Stator models and settings, and building the engine over them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from django.apps import apps
from django.conf import settings

from .._clock import Clock
from .._stator import MAX_CONCURRENCY, Stator
from .._store._django import DjangoStore
from ..errors import ConfigError

DEFAULTS: dict[str, Any] = {
    "CONCURRENCY": 4, "BATCH_SIZE": 100, "DATABASE": "default",
    "MAX_HUNG": None,  # hung handler threads a worker replaces (None: its concurrency)
}


def stator_settings() -> dict[str, Any]:
    """``settings.STATOR`` over the defaults."""
    configured = getattr(settings, "STATOR", None) or {}
    if not isinstance(configured, dict):
        raise ConfigError("settings.STATOR must be a dict, e.g. {'CONCURRENCY': 4}")
    merged = {**DEFAULTS, **configured}
    for key in ("CONCURRENCY", "BATCH_SIZE"):
        value = merged[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"settings.STATOR[{key!r}] must be a whole number >= 1, "
                              f"not {value!r}")
    budget = merged.get("RUN_BUDGET")
    if budget is not None and not (isinstance(budget, int | float) and not isinstance(
            budget, bool) and 0 < budget < math.inf):
        raise ConfigError(f"settings.STATOR['RUN_BUDGET'] must be seconds > 0 (the in-request "
                          f"runner's limit), not {budget!r}")
    hung = merged["MAX_HUNG"]
    if hung is not None and (not isinstance(hung, int) or isinstance(hung, bool)
                             or not 0 <= hung <= MAX_CONCURRENCY):
        raise ConfigError(f"settings.STATOR['MAX_HUNG'] must be a whole number from 0 to "
                          f"{MAX_CONCURRENCY} (or None for the concurrency), not {hung!r}")
    return merged


def max_hung(given: int | None) -> int | None:
    """``runstator --max-hung``, else ``STATOR['MAX_HUNG']`` (None: the concurrency)."""
    return given if given is not None else stator_settings()["MAX_HUNG"]


def stator_models() -> list[type]:
    """Every installed concrete ``StatorModel`` with a valid graph (the others fail checks)."""
    from .models import StatorModel, graph_of

    return [
        m for m in apps.get_models()
        if issubclass(m, StatorModel) and not m._meta.proxy and graph_of(m) is not None
    ]


def model_label(model: Any) -> str:
    return str(model._meta.label_lower)


def build_stator(
    *, models: Sequence[type] | None = None, clock: Clock | None = None,
    concurrency: int | None = None, batch_size: int | None = None, alias: str | None = None,
    options: dict[str, Any] | None = None,
) -> Stator:
    """A ``Stator`` over the project's models (or ``models``), on Django's connections.

    ``options`` go to each model's ``stator_claim_where(options)`` classmethod, if it has
    one: an SQL condition added to its claims (``runstator --queue`` passes
    ``{"queues": [...]}``, or ``{"queues": None}`` for all).
    """
    conf = stator_settings()
    chosen = list(stator_models() if models is None else models)
    store = DjangoStore(alias or conf["DATABASE"], chosen, options)
    return Stator._over_store(
        store, chosen, clock=clock, concurrency=int(concurrency or conf["CONCURRENCY"]),
        batch_size=int(batch_size or conf["BATCH_SIZE"]),
        listen_url=conf.get("LISTEN_URL"),  # PostgreSQL behind a pooler: wake-ups go direct
    )


def install_schema(alias: str) -> list[str]:
    return DjangoStore(alias, []).migrate()


def uninstall_schema(alias: str) -> list[str]:
    return DjangoStore(alias, []).uninstall()


def install_wakeups(alias: str) -> list[str]:
    return DjangoStore(alias, stator_models()).migrate()
