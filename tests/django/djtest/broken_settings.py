"""A project with a StatorModel that has no state_graph: ``check`` must fail (stator.E001)."""

from .proc_settings import *  # noqa: F403
from .proc_settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "djtest.broken"]
