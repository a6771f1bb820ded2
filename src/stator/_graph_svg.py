"""The state graph as SVG, laid out here (no Graphviz or Mermaid at run time: the machines
running a dashboard or a Django admin may have neither, nor internet for a CDN).

Layered layout: a state's column is its distance from the initial state along the graph's
edges (breadth first), its row its place within that column.  Forward edges are straight;
edges back to an earlier column or within one are curves, so they do not hide others.
Every node and edge carries a ``data-key`` the dashboard's script updates with live figures;
pages without a script (the Django admin) pass ``captions``, ``labels`` and ``current``
instead.  Pure, and in the core package so the Django admin needs no dashboard extra: a
graph in, markup out (every name escaped).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from html import escape

from ._graph import State, StateGraph
from ._graph_text import edge_kinds

NODE_W, NODE_H = 150, 46
COL_GAP, ROW_GAP = 90, 34
PAD = 30


@dataclass(frozen=True)
class Placed:
    state: State
    x: int
    y: int


def layout(graph: type[StateGraph]) -> dict[str, Placed]:
    """Each state's top-left corner."""
    column: dict[str, int] = {graph.initial_state.name: 0}
    queue = deque([graph.initial_state])
    while queue:
        state = queue.popleft()
        for name in sorted(state.children):
            if name not in column:
                column[name] = column[state.name] + 1
                queue.append(graph.states[name])
    last = max(column.values(), default=0)
    for name in graph.states:  # unreachable states cannot exist, but keep drawing if so
        column.setdefault(name, last + 1)
    rows: dict[int, int] = {}
    placed: dict[str, Placed] = {}
    for name in graph.states:  # declaration order within a column
        col = column[name]
        row = rows.get(col, 0)
        rows[col] = row + 1
        placed[name] = Placed(graph.states[name], PAD + col * (NODE_W + COL_GAP),
                              PAD + row * (NODE_H + ROW_GAP))
    return placed


def extent(placed: dict[str, Placed]) -> tuple[int, int]:
    """The drawing's width and height (room below the nodes for the curves of back edges)."""
    width = max(p.x for p in placed.values()) + NODE_W + PAD
    height = max(p.y for p in placed.values()) + NODE_H + PAD + 20
    return width, height


def edge_key(source: str, target: str) -> str:
    return f"edge:{source}:{target}"


def node_key(state: str) -> str:
    return f"node:{state}"


def to_svg(
    graph: type[StateGraph], roles: dict[str, str], *, current: str | None = None,
    captions: dict[str, str] | None = None, labels: bool = False,
) -> str:
    """The graph as one ``<svg class="graph">``, each node classed by its role in ``roles``.

    ``current`` marks that state's node (class ``current``, ``aria-current``); ``captions``
    fills a node's second line, ``labels`` writes each timed or exhausted edge's timing on
    it: the dashboard leaves both empty for its script to fill with live figures.
    """
    placed = layout(graph)
    captions = captions or {}
    width, height = extent(placed)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="state graph of {escape(graph.__name__)}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/>'
        '</marker></defs>',
    ]
    for source in graph.states.values():
        for name in sorted(source.children):
            parts.append(_edge(placed[source.name], placed[name], labels))
    for p in placed.values():
        name = p.state.name
        parts.append(_node(p, roles.get(name, ""), captions.get(name, ""), name == current))
    parts.append("</svg>")
    return "".join(parts)


def _edge(a: Placed, b: Placed, labels: bool = False) -> str:
    key = escape(edge_key(a.state.name, b.state.name))
    kinds = {kind for kind, _ in edge_kinds(a.state, b.state)}
    cls = "edge " + " ".join(sorted(kinds))
    label = " / ".join(text for _, text in edge_kinds(a.state, b.state) if text)
    if a is b:
        x, y = a.x + NODE_W // 2, a.y
        path = f"M{x - 20},{y} C{x - 40},{y - 40} {x + 40},{y - 40} {x + 20},{y}"
        lx, ly = x, y - 34
    elif b.x > a.x:
        x1, y1 = a.x + NODE_W, a.y + NODE_H // 2
        x2, y2 = b.x, b.y + NODE_H // 2
        path = f"M{x1},{y1} L{x2},{y2}"
        lx, ly = (x1 + x2) // 2, (y1 + y2) // 2 - 6
    else:  # back or sideways: a curve below both nodes
        x1, y1 = a.x + NODE_W // 2, a.y + NODE_H
        x2, y2 = b.x + NODE_W // 2, b.y + NODE_H
        dip = max(y1, y2) + ROW_GAP
        path = f"M{x1},{y1} C{x1},{dip} {x2},{dip} {x2},{y2}"
        lx, ly = (x1 + x2) // 2, dip - 4
    title = f"{escape(a.state.name)} → {escape(b.state.name)}"
    note = f" ({escape(label)})" if label else ""
    shown = escape(label) if labels else ""
    return (
        f'<g class="{cls}"><title>{title}{note}</title>'
        f'<path d="{path}" marker-end="url(#arrow)"/>'
        f'<text class="rate" x="{lx}" y="{ly}" text-anchor="middle" data-key="{key}">'
        f"{shown}</text></g>"
    )


def _node(p: Placed, kind: str, caption: str = "", current: bool = False) -> str:
    name = escape(p.state.name)
    key = escape(node_key(p.state.name))
    cx = p.x + NODE_W // 2
    cls = f"node {escape(kind)} current" if current else f"node {escape(kind)}"
    mark = ' aria-current="true"' if current else ""
    now = ", current state" if current else ""
    return (
        f'<g class="{cls}" id="node-{name}"{mark}><title>{name} ({escape(kind)}{now})</title>'
        f'<rect x="{p.x}" y="{p.y}" width="{NODE_W}" height="{NODE_H}" rx="8"/>'
        f'<text x="{cx}" y="{p.y + 19}" text-anchor="middle" class="name">{name}</text>'
        f'<text x="{cx}" y="{p.y + 37}" text-anchor="middle" class="count" '
        f'data-key="{key}">{escape(caption)}</text></g>'
    )
