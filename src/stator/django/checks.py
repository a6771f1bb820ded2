"""System checks: a broken Stator model fails ``manage.py check`` with a ``stator.E…`` id,
never a traceback at run time.

- E001 a concrete ``StatorModel`` without a ``state_graph`` (a ``StateGraph`` subclass)
- E002 a Stator field overridden with the wrong kind of field
- E003 a ``state_history`` that is not a ``JSONField``
- E004 a field named as in Takahē's first design, with what replaced it
- E005 a state's ``limit_key`` names no NOT NULL field of the model
- W001 the SQLite database is not in WAL mode
- W002 a state's ``limit_key`` has no ``(state, key, state_next)`` index for the claim
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from django.apps import apps
from django.core import checks
from django.core.exceptions import FieldDoesNotExist
from django.db import connections, models

from .._store._dialects import django_dialect
from ._settings import stator_settings
from ._stator_model import StatorModel, graph_of

TAKAHE_FIELDS = {
    "state_ready": "state_next (when the engine next needs the row; NULL = never)",
    "state_locked_until": "state_next (a claimed row's lease expiry is its state_next)",
    "state_attempted": "state_next (retries are scheduled in it) and state_attempts "
    "(consecutive failures)",
    "state_locked": "state_next (the lease)",
}

EXPECTED: dict[str, tuple[type[models.Field[Any, Any]], bool, str]] = {
    "state": (models.CharField, False, "a CharField (max_length >= 32), not null"),
    "state_changed": (models.DateTimeField, False, "a DateTimeField, not null"),
    "state_next": (models.DateTimeField, True, "a DateTimeField with null=True"),
    "state_attempts": (models.IntegerField, False, "an IntegerField, not null"),
}


@checks.register(checks.Tags.models)
def check_models(app_configs: Iterable[Any] | None = None, **_kwargs: Any) -> list[Any]:
    configs = list(app_configs) if app_configs is not None else apps.get_app_configs()
    found: list[Any] = []
    for config in configs:
        for model in config.get_models():
            if not issubclass(model, StatorModel) or model._meta.proxy:
                continue
            if graph_of(model) is None:
                found.append(checks.Error(
                    f"{model.__name__} is a StatorModel without a state_graph.",
                    hint="Set state_graph = <a StateGraph subclass> on the model.",
                    obj=model, id="stator.E001",
                ))
            found.extend(_field_problems(model))
            found.extend(_limit_problems(model))
    return found


def _limit_problems(model: Any) -> Iterable[Any]:
    """Each ``State(limit_key=…)`` of the model's graph: the key a NOT NULL field (a NULL key
    would be no key at all: the worker refuses it when it starts), and the index the claim
    finds each key's due rows by, without which a claim reads every due row of the state."""
    graph = graph_of(model)
    if graph is None:
        return
    fields = {f.column: f for f in model._meta.concrete_fields}
    fields.update({f.name: f for f in model._meta.concrete_fields})
    for state in graph.states.values():
        key = state.limit_key
        if key is None:
            continue
        field = fields.get(key)
        if field is None or field.null:
            yield checks.Error(
                f"{model.__name__}: {graph.__name__}.{state.name}'s limit_key={key!r} must "
                f"name a NOT NULL field of the model.",
                hint="Point limit_key at a field with null=False (a NULL is no key).",
                obj=model, id="stator.E005",
            )
            continue
        if not any(_leads_with(model, index, field.column) for index in model._meta.indexes):
            yield checks.Warning(
                f"{model.__name__}: {graph.__name__}.{state.name} is limited per {key!r}, "
                f"but no index leads with (state, {field.column}, state_next): each claim "
                f"reads every due row of the state to find the keys with room.",
                hint=f"Add models.Index(fields=['state', '{field.name}', 'state_next'], "
                f"name=..., condition=models.Q(state_next__isnull=False)) to Meta.indexes.",
                obj=model, id="stator.W002",
            )


def _leads_with(model: Any, index: models.Index, column: str) -> bool:
    names = [name.lstrip("-") for name in index.fields]
    try:
        columns = [model._meta.get_field(name).column for name in names[:3]]
    except FieldDoesNotExist:  # Django's own check names it
        return False
    return columns == ["state", column, "state_next"]


def _field_problems(model: Any) -> Iterable[Any]:
    fields = {f.name: f for f in model._meta.get_fields()}
    for name, (kind, nullable, wanted) in EXPECTED.items():
        field = fields.get(name)
        if field is None or not isinstance(field, kind) or bool(field.null) != nullable or (
            name == "state" and (field.max_length or 0) < 32
        ):
            yield checks.Error(
                f"{model.__name__}.{name} must be {wanted}: Stator reads and writes it.",
                hint="Remove the override to get Stator's own field.",
                obj=model, id="stator.E002",
            )
    history = fields.get("state_history")
    if history is not None and not isinstance(history, models.JSONField):
        yield checks.Error(
            f"{model.__name__}.state_history must be a JSONField (Stator appends "
            "[state, timestamp] pairs to it).",
            hint="state_history = models.JSONField(null=True)",
            obj=model, id="stator.E003",
        )
    for old, replacement in TAKAHE_FIELDS.items():
        if old in fields:
            yield checks.Error(
                f"{model.__name__}.{old} is a field of Takahē's first Stator design; "
                f"Stator replaced it with {replacement}.",
                hint=f"Remove {old} (and its migration's column) after porting.",
                obj=model, id="stator.E004",
            )


@checks.register()
def check_sqlite_wal(app_configs: Any = None, **_kwargs: Any) -> list[Any]:
    alias = stator_settings()["DATABASE"]
    if alias not in connections:
        return []
    conn = connections[alias]
    if not django_dialect(conn.vendor).wal or conn.is_in_memory_db():
        return []
    init = str(conn.settings_dict.get("OPTIONS", {}).get("init_command", ""))
    if "journal_mode=wal" in init.replace(" ", "").lower() or _file_is_wal(conn):
        return []
    return [checks.Warning(
        f"The SQLite database {alias!r} is not in WAL mode: workers and the application "
        "will block each other's reads.",
        hint=f"Set DATABASES[{alias!r}]['OPTIONS'] = {{'init_command': "
        "'PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;', 'transaction_mode': "
        "'IMMEDIATE'}.",
        id="stator.W001",
    )]


def _file_is_wal(conn: Any) -> bool:
    """A database converted once stays in WAL mode, whatever the settings say."""
    try:
        raw = sqlite3.connect(f"file:{conn.settings_dict['NAME']}?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        (mode,) = raw.execute("PRAGMA journal_mode").fetchone()
        return str(mode).lower() == "wal"
    except sqlite3.Error:
        return False
    finally:
        raw.close()
