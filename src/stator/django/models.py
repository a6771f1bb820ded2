"""The ``stator`` app's models module, which Django imports to register the app's models.

``StatorModel``, the abstract base of a project's Stator models, lives in ``_stator_model``
and is imported from here (its documented path); the app's own tables (workers, errors,
tasks, schedules) live in modules of their own, registered by being imported here.
"""

from __future__ import annotations

from ._ops_models import StatorError, StatorWorker
from ._schedule_model import StatorSchedule
from ._stator_model import StatorModel, StatorModelBase, StatorQuerySet
from ._task_model import StatorTask

__all__ = [
    "StatorError", "StatorModel", "StatorModelBase", "StatorQuerySet", "StatorSchedule",
    "StatorTask", "StatorWorker",
]
