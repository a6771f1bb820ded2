"""What Stator's model admins share: refusing an action the user is not offered, who did an
action (for the action log), and the store an action runs on (``store_for``, which
application code's moves share)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

if TYPE_CHECKING:
    from .._store import TrackedModel
    from .._store._django import DjangoStore

__all__ = ["admin_actor", "refuse_unpermitted_action", "store_for"]


def refuse_unpermitted_action(modeladmin: Any, request: HttpRequest, prefix: str) -> None:
    """A POST naming one of Stator's actions that this user is not offered is a 403, not
    Django's quiet "no action selected" (the action itself never runs either way)."""
    if request.method != "POST":
        return
    named = [a for a in request.POST.getlist("action") if a.startswith(prefix)]
    allowed = modeladmin.get_actions(request)
    if any(a not in allowed for a in named):
        raise PermissionDenied("you do not have the permission this action needs")


def store_for(alias: str, model: type) -> tuple[DjangoStore, TrackedModel]:
    """The Django driver for ``model`` on database ``alias`` and its tracked model, imported
    when an action runs: the admin modules load in every process that loads the apps (the
    admin's autodiscovery), and the driver brings SQLAlchemy."""
    from .._store._django import store_for as driver_for

    return driver_for(alias, model)


def admin_actor(request: HttpRequest) -> str:
    """Who did it, in Stator's action log: the admin user, marked as coming from the admin."""
    return f"admin:{request.user.get_username()}"
