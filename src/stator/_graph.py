"""State graphs: the states a row can be in, the edges between them, and per-state timing.

A graph is declared as a class and validated the moment the class is created, so a mistake
in it fails at import time with a message naming the graph and the state, never later inside
a worker.  This module is pure: no database, no clock, no threads.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ._graph_rules import state_problems
from ._plain_rows import graph_plain_rows_problem
from .errors import GraphError

DEFAULT_RETRY_AFTER = 60.0
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_RETRY_AFTER = 3600.0
HANDLER_PREFIXES = ("check_", "handle_")

Handler = Callable[[Any], Any]


@dataclass(frozen=True)
class TimedEdge:
    """An edge taken by the engine itself once a row has spent ``seconds`` in its state."""

    target: State
    seconds: float


class State:
    """One state of a graph, with the timing rules for rows in it.

    Timings are seconds.  ``try_interval`` and ``attempt_immediately`` are the names Takahē
    used; they are accepted so its graphs port unchanged.

    ``plain_rows``: True to give this state's handler a plain row instead of the model's ORM
    instance, False for the instance; None (the default) follows the graph's ``plain_rows``.
    A plain row is read-only and built straight from the claim (the model's column
    attributes, with the values the ORM would give): far cheaper per row, and the transition
    always joins the batched write.  The handler's own database writes (through a session or
    connection it opens itself) are then committed on their own, NOT atomically with the
    transition; setting an attribute of the row raises ``PlainRowError``.  Only for a state
    with a handler.
    """

    name: str
    graph: type[StateGraph]

    def __init__(
        self,
        *,
        retry_after: float | None = None,
        start_after: float | None = None,
        delete_after: float | None = None,
        timeout: float | None = None,
        externally_progressed: bool = False,
        force_initial: bool = False,
        max_attempts: int | None = None,
        backoff: float = 2.0,
        max_retry_after: float | None = None,
        handler_name: str | None = None,
        try_interval: float | None = None,
        attempt_immediately: bool | None = None,
        max_running: int | Mapping[str, int] | None = None,
        limit_key: str | None = None,
        plain_rows: bool | None = None,
    ) -> None:
        self._declared_retry = retry_after is not None or try_interval is not None
        if retry_after is not None and try_interval is not None and retry_after != try_interval:
            self._init_problem: str | None = "give retry_after or try_interval, not both"
        else:
            self._init_problem = None
        self.retry_after = float(
            retry_after if retry_after is not None
            else try_interval if try_interval is not None
            else DEFAULT_RETRY_AFTER
        )
        if start_after is None:
            # Takahē's attempt_immediately=False meant "wait one try_interval first".
            start_after = self.retry_after if attempt_immediately is False else 0.0
        self.start_after = float(start_after)
        self.delete_after = None if delete_after is None else float(delete_after)
        self.timeout = float(timeout) if timeout is not None else DEFAULT_TIMEOUT
        self.externally_progressed = externally_progressed
        self.force_initial = force_initial
        self.max_attempts = max_attempts
        self.backoff = float(backoff)
        self.max_retry_after = float(
            max_retry_after if max_retry_after is not None
            else max(DEFAULT_MAX_RETRY_AFTER, self.retry_after)
        )
        self.handler_name = handler_name
        # Rows held at once, everywhere (per value of the ``limit_key`` column): ``_limits``.
        self.max_running: int | dict[str, int] | None = (
            dict(max_running) if isinstance(max_running, Mapping) else max_running
        )
        self.limit_key = limit_key
        self.declared_plain_rows = plain_rows  # None: the graph's ``plain_rows``
        self.plain_rows = False  # what applies, once the graph is created (``_resolve_plain``)
        self.children: dict[str, State] = {}
        self.parents: dict[str, State] = {}
        self._edges: list[State] = []
        self.direct_targets: list[State] = []  # named by transitions_to itself, not implied
        self.timed_edge: TimedEdge | None = None
        self.exhausted_to: State | None = None
        self.handler: Handler | None = None
        self.handler_is_async = False
        self._name_problem: str | None = None

    # -- declaring edges (called in the class body, before names are known) ---------------

    def transitions_to(self, other: State) -> None:
        """Allow the engine (via the handler) or application code to move rows to ``other``."""
        self._check_state(other, "transitions_to")
        self._allow(other)
        if other not in self.direct_targets:
            self.direct_targets.append(other)

    def times_out_to(self, other: State, seconds: float) -> None:
        """Move rows to ``other`` once they have been ``seconds`` in this state."""
        self._check_state(other, "times_out_to")
        self.timed_edge = TimedEdge(other, float(seconds))
        self._allow(other)

    def fails_to(self, other: State) -> None:
        """Where rows go once the handler has failed ``max_attempts`` times in a row."""
        self._check_state(other, "fails_to")
        self.exhausted_to = other
        self._allow(other)

    def _allow(self, other: State) -> None:
        if other not in self._edges:
            self._edges.append(other)

    def _check_state(self, other: object, verb: str) -> None:
        if not isinstance(other, State):
            raise GraphError(f"{verb}() takes a State, not {other!r}")

    # -- naming ------------------------------------------------------------------------------

    def __set_name__(self, owner: type, name: str) -> None:
        # Not raised here: Python 3.11 wraps exceptions from __set_name__ in RuntimeError.
        # StateGraph.__init_subclass__ raises it as a GraphError.
        if hasattr(self, "name"):
            self._name_problem = (
                f"{owner.__name__}.{name}: this State object is already named "
                f"{self.name!r}; give each state its own State()"
            )
            return
        self.name = name

    # -- derived facts -------------------------------------------------------------------------

    @property
    def terminal(self) -> bool:
        """No edge leaves this state: rows here are done (though maybe deleted later)."""
        return not self.children

    @property
    def automatic(self) -> bool:
        """The engine runs a handler for rows in this state."""
        return self.handler is not None

    @property
    def scheduled(self) -> bool:
        """Rows in this state need the engine at some time (a handler, a deletion or a timeout)."""
        return self.automatic or self.delete_after is not None or self.timed_edge is not None

    @property
    def limited(self) -> bool:
        """The claim counts this state's running rows before it takes more (``max_running``)."""
        return self.max_running is not None

    @property
    def lease(self) -> float:
        """How long a claim on a row in this state lasts: twice the task deadline."""
        return 2.0 * self.timeout

    def __eq__(self, other: object) -> bool:
        if isinstance(other, State):
            return self is other
        if isinstance(other, str):
            return getattr(self, "name", None) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(getattr(self, "name", id(self)))

    def __str__(self) -> str:
        return getattr(self, "name", "<unnamed state>")

    def __repr__(self) -> str:
        graph = getattr(self, "graph", None)
        prefix = f"{graph.__name__}." if graph is not None else ""
        return f"<State {prefix}{self}>"


class StateGraph:
    """Base class of state graphs; subclasses declare ``State`` attributes and handlers.

    After class creation a graph has ``states`` (by name), ``initial_state``,
    ``terminal_states`` and ``automatic_states``.

    ``plain_rows = True`` on the graph gives every handler of it a plain row (read-only,
    cheap, its handler's own database writes NOT committed with the transition) instead of
    the model's ORM instance; a state overrides it with ``State(plain_rows=False)`` (or the
    other way round).  See ``State``.
    """

    plain_rows: ClassVar[bool] = False
    states: ClassVar[dict[str, State]] = {}
    initial_state: ClassVar[State]
    terminal_states: ClassVar[frozenset[State]] = frozenset()
    automatic_states: ClassVar[frozenset[State]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        states = {name: v for name, v in vars(cls).items() if isinstance(v, State)}
        if not states:
            raise GraphError(f"{cls.__name__}: a state graph needs at least one State")
        for state in states.values():
            if state._name_problem:
                raise GraphError(state._name_problem)
        for state in states.values():
            state.graph = cls
        _link_edges(cls, states)
        _bind_handlers(cls, states)
        cls.states = states
        cls.initial_state = _find_initial(cls, states)
        _check_reachable(cls, states, cls.initial_state)
        _check_states(cls, states)
        _resolve_plain(cls, states)
        cls.terminal_states = frozenset(s for s in states.values() if s.terminal)
        cls.automatic_states = frozenset(s for s in states.values() if s.automatic)

    @classmethod
    def get_state(cls, state: State | str) -> State:
        """The graph's state named ``state``; a clear error if there is none."""
        name = state.name if isinstance(state, State) else state
        try:
            return cls.states[name]
        except KeyError:
            known = ", ".join(cls.states)
            raise GraphError(f"{cls.__name__} has no state {name!r} (it has: {known})") from None

    @classmethod
    def scheduled_states(cls) -> list[State]:
        """States whose rows the engine claims, in declaration order."""
        return [s for s in cls.states.values() if s.scheduled]

    @classmethod
    def edges(cls) -> Iterator[tuple[State, State]]:
        for state in cls.states.values():
            for child in state.children.values():
                yield state, child


def role(state: State | None) -> str:
    """What a state is, for its node's class: initial, automatic, external, terminal,
    exhausted (a give-up target), or unknown (a name no longer in the graph)."""
    if state is None:
        return "unknown"
    graph = state.graph
    exhausted = any(s.exhausted_to is state for s in graph.states.values())
    if exhausted:
        return "exhausted"
    if state is graph.initial_state:
        return "initial"
    if state.terminal:
        return "terminal"
    if state.externally_progressed:
        return "external"
    return "automatic"


def _link_edges(cls: type[StateGraph], states: dict[str, State]) -> None:
    members = {id(s) for s in states.values()}
    for state in states.values():
        for target in state._edges:
            if id(target) not in members:
                raise GraphError(
                    f"{cls.__name__}.{state.name}: transition to {target!r}, which is not a "
                    f"state of {cls.__name__}"
                )
            state.children[target.name] = target
            target.parents[state.name] = state


def _bind_handlers(cls: type[StateGraph], states: dict[str, State]) -> None:
    for attr in dir(cls):
        for prefix in HANDLER_PREFIXES:
            if attr.startswith(prefix) and attr[len(prefix):] not in states:
                raise GraphError(
                    f"{cls.__name__}.{attr}: a handler for state {attr[len(prefix):]!r}, "
                    f"which {cls.__name__} does not have"
                )
    for name, state in states.items():
        candidates = [state.handler_name] if state.handler_name else [
            p + name for p in HANDLER_PREFIXES
        ]
        found = [c for c in candidates if c is not None and hasattr(cls, c)]
        if state.handler_name and not found:
            raise GraphError(
                f"{cls.__name__}.{name}: handler_name={state.handler_name!r} does not exist"
            )
        if len(found) > 1:
            raise GraphError(f"{cls.__name__}.{name}: both {found[0]} and {found[1]} are defined")
        if found:
            state.handler, state.handler_is_async = _resolve_handler(cls, found[0])


def _resolve_handler(cls: type[StateGraph], attr: str) -> tuple[Handler, bool]:
    raw = inspect.getattr_static(cls, attr)
    if isinstance(raw, (classmethod, staticmethod)):
        func = raw.__func__
        handler: Handler = getattr(cls, attr)
    elif inspect.isfunction(raw):
        func = raw

        @functools.wraps(raw)  # so failure reports can point at the function itself
        def handler(instance: Any, _f: Any = raw) -> Any:  # plain function: pass the graph in
            return _f(cls, instance)
    else:
        raise GraphError(f"{cls.__name__}.{attr}: a handler must be a function or classmethod")
    return handler, inspect.iscoroutinefunction(func)


def _find_initial(cls: type[StateGraph], states: dict[str, State]) -> State:
    forced = [s for s in states.values() if s.force_initial]
    if len(forced) > 1:
        names = ", ".join(s.name for s in forced)
        raise GraphError(f"{cls.__name__}: several states have force_initial=True ({names})")
    if forced:
        return forced[0]
    entries = [s for s in states.values() if not s.parents]
    if len(entries) == 1:
        return entries[0]
    if not entries:
        raise GraphError(
            f"{cls.__name__}: every state has a way in, so none is the initial state; "
            "mark the entry state with State(force_initial=True)"
        )
    names = ", ".join(s.name for s in entries)
    raise GraphError(
        f"{cls.__name__}: several states have no way in ({names}); a graph has one initial "
        "state: add transitions into the others or remove them"
    )


def _check_reachable(cls: type[StateGraph], states: dict[str, State], initial: State) -> None:
    seen = {initial.name}
    todo = [initial]
    while todo:
        for child in todo.pop().children.values():
            if child.name not in seen:
                seen.add(child.name)
                todo.append(child)
    unreachable = [name for name in states if name not in seen]
    if unreachable:
        raise GraphError(
            f"{cls.__name__}: state(s) {', '.join(unreachable)} cannot be reached from the "
            f"initial state {initial.name}"
        )


def _resolve_plain(cls: type[StateGraph], states: dict[str, State]) -> None:
    problem = graph_plain_rows_problem(cls.plain_rows)
    if problem:
        raise GraphError(f"{cls.__name__}: {problem}")
    for state in states.values():
        declared = state.declared_plain_rows
        state.plain_rows = state.automatic and (
            cls.plain_rows if declared is None else bool(declared))


def _check_states(cls: type[StateGraph], states: dict[str, State]) -> None:
    for state in states.values():
        where = f"{cls.__name__}.{state.name}"
        for problem in state_problems(state):
            raise GraphError(f"{where}: {problem}")
