"""``settings.STATOR``: Stator's settings in a Django project, over their defaults.

A leaf: the task backend reads them while apps may still be loading, so nothing here imports
a model.
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings

from .._limits import MAX_CONCURRENCY
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
