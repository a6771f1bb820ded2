"""``StatorModel``: the abstract Django model whose rows Stator runs.

A concrete subclass sets ``state_graph``; the metaclass then gives it the four Stator fields
with *database* defaults taken from that graph (the initial state's name, "now", "now + its
start_after"), so rows inserted by ``create``, ``bulk_create`` or raw SQL all start in the
initial state and are due at once.  The defaults are literals in the migration: old
migrations never import the graph.  The claim index is a partial index on
``(state, state_next) WHERE state_next IS NOT NULL``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from django.db import models

from .._clock import Clock
from .._graph import State, StateGraph
from .._policy import first_due
from .fields import NowPlus, StatorDateTimeField

STATOR_FIELDS = ("state", "state_changed", "state_next", "state_attempts")
INDEX_FIELDS = ("state", "state_next")
ENGINE_FIELDS = (*STATOR_FIELDS, "state_history")
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def engine_owned_fields(model: Any) -> list[str]:
    """The model's fields only the engine writes: the Stator fields, ``state_history``, and
    the columns its claim sets (``stator_lease_column``, ``stator_claim_stamps``) - those the
    model has.  An admin form must not offer them: a hand edit would rewrite a row's history
    or lease under a running worker."""
    named = [*ENGINE_FIELDS, getattr(model, "stator_lease_column", None),
             *(getattr(model, "stator_claim_stamps", None) or {})]
    fields = {f.name for f in model._meta.get_fields()}
    return [n for n in dict.fromkeys(named) if n in fields]


def graph_of(model: Any) -> type[StateGraph] | None:
    return _as_graph(getattr(model, "state_graph", None))


def _as_graph(graph: Any) -> type[StateGraph] | None:
    return graph if isinstance(graph, type) and issubclass(graph, StateGraph) else None


def stator_fields(graph: type[StateGraph] | None) -> dict[str, models.Field[Any, Any]]:
    """The four fields for a model run by ``graph`` (no graph: no defaults, see E001)."""
    initial = graph.initial_state if graph is not None else None
    due = first_due(initial, _EPOCH) if initial is not None else None
    state: dict[str, Any] = {"max_length": 100, "db_index": False}
    if initial is not None:
        state.update(default=initial.name, db_default=initial.name)
    return {
        "state": models.CharField(**state),
        "state_changed": StatorDateTimeField(db_default=NowPlus(0)),
        "state_next": StatorDateTimeField(
            null=True, blank=True,
            db_default=None if due is None else NowPlus((due - _EPOCH).total_seconds()),
        ),
        "state_attempts": models.IntegerField(default=0, db_default=0),
    }


class StatorModelBase(models.base.ModelBase):
    def __new__(mcs, name: str, bases: tuple[type, ...], attrs: dict[str, Any], **kw: Any) -> Any:
        meta = attrs.get("Meta")
        abstract = bool(getattr(meta, "abstract", False))
        # A proxy (a second admin, other methods) shares its concrete model's table and
        # fields: adding the fields again would clash with the inherited ones.
        proxy = bool(getattr(meta, "proxy", False))
        if not abstract and not proxy:
            declared = attrs.get("state_graph")
            graph = _as_graph(declared) or next((g for b in bases if (g := graph_of(b))), None)
            for field_name, field in stator_fields(graph).items():
                attrs.setdefault(field_name, field)  # a declared field is checked (E002)
        cls = super().__new__(mcs, name, bases, attrs, **kw)
        if not abstract and not cls._meta.proxy and not cls._meta.abstract:
            _add_claim_index(cls)
        return cls


def _add_claim_index(cls: Any) -> None:
    opts = cls._meta
    if any(tuple(ix.fields) == INDEX_FIELDS and ix.condition is not None for ix in opts.indexes):
        return
    index = models.Index(
        fields=list(INDEX_FIELDS), condition=models.Q(state_next__isnull=False), name="stator"
    )
    index.set_name_with_model(cls)
    opts.indexes = [*opts.indexes, index]  # a new list: Meta's may be shared with a base
    opts.original_attrs["indexes"] = opts.indexes


class StatorQuerySet(models.QuerySet):
    def transition_perform(self, to: State | str, *, clock: Clock | None = None) -> int:
        """Move every row of this queryset that is in a state with an edge to ``to``, in one
        conditional UPDATE; returns how many moved.  Workers are woken on commit."""
        from .._store._django_moves import perform_many  # not a worker's: imported when used

        return perform_many(self, to, clock)


class StatorModel(models.Model, metaclass=StatorModelBase):
    """Subclass it, set ``state_graph``; optionally add
    ``state_history = JSONField(null=True, blank=True)``."""

    state_graph: ClassVar[type[StateGraph]]

    state = models.CharField(max_length=100)
    state_changed = StatorDateTimeField(db_default=NowPlus(0))
    state_next = StatorDateTimeField(null=True, blank=True)
    state_attempts = models.IntegerField(default=0, db_default=0)

    objects = StatorQuerySet.as_manager()

    class Meta:
        abstract = True

    @classmethod
    def transition_perform_queryset(
        cls, queryset: Any, to: State | str, *, clock: Clock | None = None
    ) -> int:
        """Takahē's spelling of ``queryset.transition_perform(to)``."""
        from .._store._django_moves import perform_many

        return perform_many(queryset, to, clock)

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Saving an existing row leaves the engine's fields alone (unless named in
        ``update_fields``): the Stator fields, the history, the lease column and the claim
        stamps belong to the engine and to ``transition_perform``, and an instance read a
        while ago would otherwise write back a stale state, due time or lease."""
        if (not self._state.adding and not args and kwargs.get("update_fields") is None
                and not kwargs.get("force_insert")):
            owned = set(engine_owned_fields(type(self)))  # the lease and claim stamps too
            kwargs["update_fields"] = [
                f.name for f in self._meta.concrete_fields
                if not f.primary_key and f.name not in owned
            ]
        super().save(*args, **kwargs)

    def transition_perform(self, to: State | str, *, clock: Clock | None = None) -> None:
        """Move this row to ``to`` now, in the caller's transaction (autocommit outside one).

        Checked against the graph, and conditional on the row still being in the state this
        instance shows: if someone (a worker, say) moved it meanwhile, ``TransitionConflict``
        is raised and nothing changes.  Workers are woken when the transaction commits.
        """
        from .._store._django_moves import perform  # not a worker's: imported when used

        perform(self, to, clock)

