"""Plain rows: the read-only objects a handler gets, instead of the model's ORM instances, in
a state whose graph or ``State`` says ``plain_rows``.

A plain row is built straight from the claim's tuple, its values converted as the driver's
ORM would convert them (the driver hands them in so).  One class per model, made once: its
``__slots__`` are the model's column attributes, and a builder made for it sets them without
the attribute machinery, a few times cheaper than a bare ORM instance, and with no session to
attach it to or detach it from afterwards.  A plain row is not a model instance: it has the
columns and nothing else (no methods, properties or relationships of the model).

Read-only: setting (or deleting) an attribute raises ``PlainRowError``, naming the state and
how to opt out, since nothing would write the change.  The one exception is ``stator_extra``
(values for the model's ``stator_write_columns`` or ``stator_write_extra``), which the engine
does write, with the transition.

Its handler runs in ``NO_WRITES``: no session, no transaction of its own, so its transition
always joins the batched write; anything the handler writes to the database itself is
committed on its own, never atomically with the transition.

Pure: no database.  The option as declared is checked here too (``plain_rows_problems``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, PlainRowError

if TYPE_CHECKING:
    from ._policy import Write
    from ._store._tracked import TrackedModel
    from ._store.interface import Driver

EXTRA = "stator_extra"  # the one attribute a handler may set on a plain row


def plain_rows_problems(declared: object, automatic: bool) -> Iterator[str]:
    """What is wrong with a state's ``plain_rows`` as declared (None: the graph's)."""
    if declared is None:
        return
    if not isinstance(declared, bool):
        yield f"plain_rows must be True or False (got {declared!r})"
    elif declared and not automatic:
        yield "plain_rows only applies to a state with a handler (only its handler gets rows)"


def graph_plain_rows_problem(value: object) -> str | None:
    """What is wrong with a graph's ``plain_rows`` class attribute, if anything."""
    if isinstance(value, bool):
        return None
    return f"plain_rows must be True or False (got {value!r})"


class PlainRow:
    """Base of every model's plain row class (see the module docstring)."""

    __slots__ = ()
    _stator_model = ""  # the model's name and its graph's, for messages
    _stator_graph = ""
    _columns: tuple[str, ...] = ()  # the slots of the model's columns, in order

    def __setattr__(self, name: str, value: Any) -> None:
        if name == EXTRA:
            object.__setattr__(self, name, value)
            return
        raise PlainRowError(self._refusal(f"setting {name!r}"))

    def __delattr__(self, name: str) -> None:
        raise PlainRowError(self._refusal(f"deleting {name!r}"))

    def _refusal(self, what: str) -> str:
        state = getattr(self, "state", "?")
        return (
            f"{self._stator_model} rows in state {state!r} are plain rows (read-only): "
            f"{what} is refused, since nothing would save it. For the model's instance, "
            "whose changes commit with the transition, give that state "
            f"State(plain_rows=False) on {self._stator_graph} (or set plain_rows = False on "
            "the graph)."
        )

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name, None)!r}" for name in self._columns)
        return f"<{self._stator_model} plain row {shown}>"


def plain_row_builder(
    model: type, names: Sequence[str], extra: Mapping[str, Any] | None = None
) -> Callable[[Sequence[Any]], PlainRow]:
    """The function that makes ``model``'s plain row from its values (in ``names``' order):
    one class, made here, with a slot per name (and ``stator_extra``); ``extra``: more class
    attributes (the Django driver's ``pk``)."""
    taken = {EXTRA, *dir(PlainRow), *(extra or {})}
    bad = [n for n in names if not n.isidentifier() or n.startswith("__") or n in taken]
    if bad:
        raise ConfigError(
            f"{model.__name__}: plain rows need column attributes that are plain Python "
            f"names; {', '.join(map(repr, bad))} cannot be one (give the state "
            "State(plain_rows=False))"
        )
    graph = getattr(model, "state_graph", None)
    namespace: dict[str, Any] = {
        "__slots__": (*names, EXTRA), "__module__": __name__,
        "_stator_model": model.__name__, "_columns": tuple(names),
        "_stator_graph": getattr(graph, "__name__", "its graph"),
        **(extra or {}),
    }
    cls = type(f"{model.__name__}PlainRow", (PlainRow,), namespace)
    # Each slot set through its own descriptor, unrolled: the generated function (as
    # ``dataclasses`` generates ``__init__``) costs about half of a loop over the slots.
    # ``stator_extra`` starts as None: the engine reads it after every handler, and a slot
    # never set costs that read an AttributeError raised and caught (four times the time).
    setters = {f"_set{i}": getattr(cls, name).__set__ for i, name in enumerate(names)}
    lines = [f"    _set{i}(row, values[{i}])" for i in range(len(names))]
    lines.append("    _set_extra(row, None)")
    source = "def build(values):\n    row = _new(_cls)\n" + "\n".join(lines) + "\n    return row\n"
    scope: dict[str, Any] = {
        "_new": object.__new__, "_cls": cls, "_set_extra": getattr(cls, EXTRA).__set__,
        **setters,
    }
    exec(source, scope)  # the source is made above from slot indexes only, no names
    build: Callable[[Sequence[Any]], PlainRow] = scope["build"]
    return build


class NoWrites:
    """The handler scope of a plain row: nothing to hold, nothing written with the transition
    (``HandlerScope``; the transition always joins the batched write)."""

    def wrote(self) -> bool:
        return False

    def commit_with(
        self, store: Driver, tracked: TrackedModel, write: Write, worker_id: str
    ) -> bool:
        raise AssertionError("a plain row's handler has nothing to commit with its transition")

    def rollback(self) -> None:
        pass

    def release(self) -> None:
        pass


NO_WRITES = NoWrites()
