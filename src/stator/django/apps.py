"""The Django app: registers Stator's system checks and its post-migrate wake-up triggers."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class StatorConfig(AppConfig):
    name = "stator.django"
    label = "stator"
    verbose_name = "Stator"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported once the models are: the checks module imports them (and registers checks).
        from . import checks  # noqa: F401

        post_migrate.connect(_install_wakeups, sender=self)


def _install_wakeups(using: str = "default", **_kwargs: Any) -> None:
    """After ``migrate``: PostgreSQL insert triggers that wake idle workers (as ``stator
    migrate`` installs them for SQLAlchemy tables)."""
    from ._setup import install_wakeups  # imports models: not while this module is loaded

    install_wakeups(using)
