"""Drawing state graphs as Mermaid ``stateDiagram-v2`` or Graphviz dot text.

A graph's timing rules are as much a part of its behaviour as its edges (a row that waits
seven days, then gives up, is a different machine from one that gives up at once), so the
diagrams carry them: timed and exhausted edges are labelled with when they fire, and each
state lists the timings a reader would otherwise have to look up in the code.  Defaults are
left out so the labels stay short enough to read.

Both outputs are plain text built from graph metadata only; nothing here imports a renderer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ._graph import DEFAULT_MAX_RETRY_AFTER, DEFAULT_TIMEOUT, State, StateGraph

UNITS = (("d", 86400), ("h", 3600), ("m", 60))
DEFAULT_BACKOFF = 2.0
EXTERNAL = "externally progressed"


def format_seconds(seconds: float) -> str:
    """``45s``, ``5m``, ``2h``, ``1d``, ``1h30m``, ``250ms``: short enough for an edge label,
    exact enough that two different timings never print the same."""
    if seconds < 0:
        return "-" + format_seconds(-seconds)
    if 0 < seconds < 1:
        return f"{seconds * 1000:g}ms"
    parts: list[str] = []
    whole = int(seconds)
    for suffix, size in UNITS:
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count}{suffix}")
    rest = whole + (seconds - int(seconds))
    if rest or not parts:
        parts.append(f"{rest:g}s")
    return "".join(parts)


def state_notes(state: State) -> list[str]:
    """The facts about a state worth printing beside its name, one short phrase each.

    Only what differs from Stator's defaults is listed (except the retry interval of a state
    with a handler, which is the first thing anyone asks about it).
    """
    notes: list[str] = []
    if state.externally_progressed:
        notes.append(EXTERNAL)
    if state.automatic:
        notes.append(_retry_note(state))
        if state.start_after > 0:
            notes.append(f"start after {format_seconds(state.start_after)}")
        if state.timeout != DEFAULT_TIMEOUT:
            notes.append(f"deadline {format_seconds(state.timeout)}")
    if state.delete_after is not None:
        notes.append(f"delete after {format_seconds(state.delete_after)}")
    return notes


def _retry_note(state: State) -> str:
    note = f"retry {format_seconds(state.retry_after)}"
    if state.backoff != DEFAULT_BACKOFF:
        note += f" x{state.backoff:g}"
    if state.max_retry_after != max(DEFAULT_MAX_RETRY_AFTER, state.retry_after):
        note += f" up to {format_seconds(state.max_retry_after)}"
    return note


def edge_kinds(source: State, target: State) -> list[tuple[str, str]]:
    """Each way from ``source`` to ``target`` as (kind, label), one drawn edge each: a
    handler's or the application's choice (``chosen``, unlabelled), the engine's timeout
    (``timed``) and its give-up after failures (``exhausted``).  Two ways between the same
    states are two edges, or a reader would miss one of them."""
    kinds: list[tuple[str, str]] = []
    if target in source.direct_targets:
        kinds.append(("chosen", ""))
    timed = source.timed_edge
    if timed is not None and timed.target is target:
        kinds.append(("timed", f"after {format_seconds(timed.seconds)}"))
    if source.exhausted_to is target:
        attempts = source.max_attempts
        noun = "failure" if attempts == 1 else "failures"
        kinds.append(("exhausted", f"after {attempts} {noun}" if attempts else "exhausted"))
    return kinds or [("chosen", "")]


def _ids(graphs: Sequence[type[StateGraph]]) -> list[str]:
    """One identifier per graph, unique even if two graphs share a class name."""
    seen: dict[str, int] = {}
    out: list[str] = []
    for graph in graphs:
        count = seen.get(graph.__name__, 0)
        seen[graph.__name__] = count + 1
        out.append(graph.__name__ if count == 0 else f"{graph.__name__}_{count + 1}")
    return out


# -- Mermaid -------------------------------------------------------------------------------


def to_mermaid(graphs: Sequence[type[StateGraph]]) -> str:
    """A Mermaid ``stateDiagram-v2``; several graphs become one composite state each, so
    their start and end markers do not merge."""
    lines = ["stateDiagram-v2", "    direction LR"]
    nested = len(graphs) > 1
    for gid, graph in zip(_ids(graphs), graphs, strict=True):
        body = list(_mermaid_graph(gid, graph))
        if nested:
            lines.append(f"    state {gid} {{")
            lines.extend("    " + line for line in body)
            lines.append("    }")
        else:
            lines.append(f"    %% {gid}")
            lines.extend(body)
    return "\n".join(lines) + "\n"


def _mermaid_graph(gid: str, graph: type[StateGraph]) -> Iterator[str]:
    # Mermaid state ids are global to the diagram and a few words are keywords, so ids are
    # prefixed with the graph; the displayed name comes from the description.
    def sid(state: State) -> str:
        return f"{gid}__{state.name}"

    for state in graph.states.values():
        yield f'    state "{_mermaid_text(state.name)}" as {sid(state)}'
        for note in state_notes(state):
            yield f"    {sid(state)} : {_mermaid_text(note)}"
    yield f"    [*] --> {sid(graph.initial_state)}"
    for source, target in graph.edges():
        for _kind, label in edge_kinds(source, target):
            suffix = f" : {_mermaid_text(label)}" if label else ""
            yield f"    {sid(source)} --> {sid(target)}{suffix}"
    for state in graph.states.values():
        if state.terminal:
            yield f"    {sid(state)} --> [*]"


def _mermaid_text(text: str) -> str:
    """Keep free text from being read as Mermaid syntax (quotes, comments, statement ends)."""
    for bad, good in (('"', "'"), (";", ","), ("%%", "%"), ("{", "("), ("}", ")")):
        text = text.replace(bad, good)
    return text.replace("\n", " ")


# -- Graphviz dot --------------------------------------------------------------------------


def to_dot(graphs: Sequence[type[StateGraph]]) -> str:
    """A Graphviz ``digraph`` with one cluster per graph.

    Conventions: a filled dot points at the initial state, terminal states have a double
    border, externally progressed states a dashed one; timed edges are dashed, exhausted
    edges red.
    """
    lines = [
        "digraph stator {",
        "  rankdir=LR;",
        '  graph [fontname="Helvetica"];',
        '  node [shape=box, style=rounded, fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=10];',
    ]
    for gid, graph in zip(_ids(graphs), graphs, strict=True):
        lines.append(f"  subgraph {_dot_id('cluster_' + gid)} {{")
        lines.append(f"    label={_dot_id(graph.__name__)};")
        lines.extend(_dot_graph(gid, graph))
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_graph(gid: str, graph: type[StateGraph]) -> Iterator[str]:
    def nid(state: State) -> str:
        return _dot_id(f"{gid}.{state.name}")

    start = _dot_id(f"{gid}.__start__")
    yield f'    {start} [shape=point, width=0.15, label=""];'
    for state in graph.states.values():
        yield f"    {nid(state)} [{_dot_attrs(_dot_node_attrs(state))}];"
    yield f"    {start} -> {nid(graph.initial_state)};"
    for source, target in graph.edges():
        for kind, label in edge_kinds(source, target):
            attrs = _dot_edge_attrs(kind, label)
            tail = f" [{_dot_attrs(attrs)}]" if attrs else ""
            yield f"    {nid(source)} -> {nid(target)}{tail};"


def _dot_node_attrs(state: State) -> dict[str, str]:
    attrs = {"label": "\n".join([state.name, *state_notes(state)])}
    if state.externally_progressed:
        attrs["style"] = "rounded,dashed"
    if state.terminal:
        attrs["peripheries"] = "2"
    return attrs


def _dot_edge_attrs(kind: str, label: str) -> dict[str, str]:
    attrs: dict[str, str] = {}
    if label:
        attrs["label"] = label
    if kind == "timed":
        attrs["style"] = "dashed"
    if kind == "exhausted":
        attrs["color"] = attrs["fontcolor"] = "firebrick"
    return attrs


def _dot_attrs(attrs: dict[str, str]) -> str:
    return ", ".join(f"{key}={_dot_id(value)}" for key, value in attrs.items())


def _dot_id(text: str) -> str:
    """A double-quoted dot ID; newlines become dot's centred line breaks."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
