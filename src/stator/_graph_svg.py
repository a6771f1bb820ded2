"""The state graph as SVG, drawn on the server (no Graphviz, no script, no CDN: the machines
running a dashboard or a Django admin may have none of them, nor internet).

The geometry comes from :mod:`stator._graph_layout` (a layered layout); this module writes
it out.  Every node and edge carries a ``data-key`` the dashboard's script updates with
live figures; pages without a script (the Django admin) pass ``captions`` and
``current`` instead, and ``rates=False`` so no room is kept for live rates.  What a reader
cannot guess is marked and explained in a legend under the drawing: externally progressed
states have a dashed border, terminal ones a double border, timeouts are dashed edges and
give-ups red ones, each labelled with when it fires.  Pure, and in the core package so the
Django admin needs no dashboard extra: a graph in, markup out (every name escaped).
"""

from __future__ import annotations

from html import escape

from ._graph import StateGraph
from ._graph_layout import LINE_H, PAD, Box, Drawing, Node, Route, layout, text_width

LEGEND_H = 22
LEGEND = (
    ("external", "dashed box: moved on by application code"),
    ("terminal", "double box: terminal"),
    ("timed", "dashed line: timeout"),
    ("exhausted", "red line: given up after failures"),
)


def extent(drawing: Drawing) -> tuple[int, int]:
    """The drawing's width and height, legend included."""
    legend = _legend(drawing)
    width = max(drawing.width, PAD + text_width(legend, 11) + PAD) if legend else drawing.width
    return int(width + 0.5), int(drawing.height + (LEGEND_H if legend else 0) + 0.5)


def edge_key(source: str, target: str) -> str:
    return f"edge:{source}:{target}"


def node_key(state: str) -> str:
    return f"node:{state}"


def to_svg(
    graph: type[StateGraph], roles: dict[str, str], *, current: str | None = None,
    captions: dict[str, str] | None = None, rates: bool = True,
) -> str:
    """The graph as one ``<svg class="graph">``, each node classed by its role in ``roles``.

    ``current`` marks that state's node (class ``current``, ``aria-current``); ``captions``
    fills a node's second line; ``rates`` keeps a slot on each pair of states' first edge
    for the dashboard's script to write transitions per minute in.
    """
    drawing = layout(graph, rates=rates)
    captions = captions or {}
    width, height = extent(drawing)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="state graph of {escape(graph.__name__)}">',
        '<defs>',
        *(f'<marker id="arrow{suffix}" viewBox="0 0 10 10" refX="10" refY="5" '
          f'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
          f'<path class="arrow{suffix}" d="M0,0 L10,5 L0,10 z"/></marker>'
          for suffix in ("", "-exhausted")),
        '</defs>',
    ]
    parts.extend(_edge(r) for r in drawing.routes)
    for node in drawing.nodes.values():
        name = node.state.name
        parts.append(_node(node, roles.get(name, ""), captions.get(name, ""), name == current))
    legend = _legend(drawing)
    if legend:
        parts.append(f'<text class="legend" x="{PAD}" y="{height - 8}">{escape(legend)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _legend(drawing: Drawing) -> str:
    present = {r.kind for r in drawing.routes}
    for node in drawing.nodes.values():
        if node.state.externally_progressed:
            present.add("external")
        if node.state.terminal:
            present.add("terminal")
    return " · ".join(text for kind, text in LEGEND if kind in present)


def _f(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def _edge(r: Route) -> str:
    key = escape(edge_key(r.source, r.target))
    title = f"{escape(r.source)} → {escape(r.target)}"
    note = f" ({escape(r.label)})" if r.label else ""
    d = "M" + " L".join(f"{_f(x)},{_f(y)}" for x, y in r.points)
    if r.source == r.target:  # a loop: rounded over the box
        (x1, y1), (_, top), (x2, _), _end = r.points
        d = f"M{_f(x1)},{_f(y1)} C{_f(x1)},{_f(top)} {_f(x2)},{_f(top)} {_f(x2)},{_f(y1)}"
    marker = "arrow-exhausted" if r.kind == "exhausted" else "arrow"
    parts = [
        f'<g class="edge {escape(r.kind)}" data-from="{escape(r.source)}" '
        f'data-to="{escape(r.target)}"><title>{title}{note}</title>'
        f'<path d="{d}" marker-end="url(#{marker})"/>'
    ]
    if r.label_box is not None:
        parts.append(_text(r.label_box, "label", escape(r.label)))
    if r.rate_box is not None:
        parts.append(_text(r.rate_box, "rate", "", f' data-key="{key}"'))
    parts.append("</g>")
    return "".join(parts)


def _text(box: Box, cls: str, text: str, extra: str = "") -> str:
    x, y = box.x + box.w / 2, box.y + LINE_H - 4
    return (f'<text class="{cls}" x="{_f(x)}" y="{_f(y)}" text-anchor="middle"{extra}>'
            f"{text}</text>")


def _node(node: Node, kind: str, caption: str = "", current: bool = False) -> str:
    b = node.box
    state = node.state
    name = escape(state.name)
    key = escape(node_key(state.name))
    cx = b.x + b.w / 2
    cls = f"node {escape(kind)} current" if current else f"node {escape(kind)}"
    mark = ' aria-current="true"' if current else ""
    now = ", current state" if current else ""
    facts = [kind, *(["externally progressed"] if state.externally_progressed
                     and kind != "external" else []), *(["terminal"] if state.terminal
                                                         and kind != "terminal" else [])]
    dashed = ' stroke-dasharray="6 3"' if state.externally_progressed else ""
    inner = (f'<path class="inner" d="{_rounded(Box(b.x + 3, b.y + 3, b.w - 6, b.h - 6), 6)}" '
             'fill="none"/>' if state.terminal else "")
    return (
        f'<g class="{cls}" id="node-{name}"{mark}><title>{name} '
        f'({escape(", ".join(f for f in facts if f))}{now})</title>'
        f'<rect x="{_f(b.x)}" y="{_f(b.y)}" width="{_f(b.w)}" height="{_f(b.h)}" rx="8"'
        f'{dashed}/>{inner}'
        f'<text x="{_f(cx)}" y="{_f(b.y + 19)}" text-anchor="middle" class="name">{name}</text>'
        f'<text x="{_f(cx)}" y="{_f(b.y + 37)}" text-anchor="middle" class="count" '
        f'data-key="{key}">{escape(caption)}</text></g>'
    )


def _rounded(b: Box, r: float) -> str:
    """A rounded rectangle as a path (the second border of a terminal state: not a
    ``rect``, which stylesheets treat as the node's box)."""
    return (f"M{_f(b.x + r)},{_f(b.y)} H{_f(b.right - r)} A{r},{r} 0 0 1 {_f(b.right)},"
            f"{_f(b.y + r)} V{_f(b.bottom - r)} A{r},{r} 0 0 1 {_f(b.right - r)},{_f(b.bottom)}"
            f" H{_f(b.x + r)} A{r},{r} 0 0 1 {_f(b.x)},{_f(b.bottom - r)} V{_f(b.y + r)}"
            f" A{r},{r} 0 0 1 {_f(b.x + r)},{_f(b.y)} Z")
