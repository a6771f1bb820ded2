"""Where each box, edge and label of a state graph goes: a layered (Sugiyama) layout by
grandalf, left to right, with the edges routed here.

grandalf ranks the states, orders each rank to cut crossings and places them without
overlaps; it knows nothing of labels or of two edges between the same states.  So every
drawn edge (one per way between two states, see :func:`edge_kinds`) is laid out as two
edges through a vertex of its own, sized to hold the edge's label: a label is then a box
the layout keeps clear of every other box, and two edges between the same states pass
through two different vertices, so they never share a path.

Routing keeps edges off boxes by construction: inside a rank an edge runs level (at its
own port on a state's side, along the foot of its label, or through the vertex grandalf
adds where an edge spans ranks), and every rank's boxes lie in disjoint bands of height;
between ranks, where there are no boxes, it runs straight.  An edge to the same state is
a loop over its box, with room kept for it.  Pure: a graph in, geometry out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from grandalf.graphs import Edge as GEdge
from grandalf.graphs import Graph as GGraph
from grandalf.graphs import Vertex as GVertex
from grandalf.layouts import SugiyamaLayout

from ._graph import State, StateGraph
from ._graph_text import edge_kinds

NODE_H = 46
NODE_MIN_W = 120
PAD = 24  # around the drawing
RANK_GAP = 36  # between ranks, where edges run straight
SIBLING_GAP = 16  # between boxes in a rank
LINE_H = 15  # one line of an edge's label
LINE_GAP = 8  # between two edges crossing a rank through placeholders
LOOP_H = 24  # the height a loop over a box needs
RATE_TEXT = "9999.9/min"  # the widest rate the dashboard writes on an edge


def text_width(text: str, size: float, bold: bool = False) -> float:
    """A generous estimate of rendered width: browsers' sans-serif fonts average about
    0.55 em a character (0.6 bold); the drawing must hold the text without measuring it."""
    return len(text) * size * (0.62 if bold else 0.58) + 2


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    w: float
    h: float

    @property
    def right(self) -> float:
        return self.x + self.w

    @property
    def bottom(self) -> float:
        return self.y + self.h

    def overlaps(self, other: Box) -> bool:
        return (self.x < other.right and other.x < self.right
                and self.y < other.bottom and other.y < self.bottom)


@dataclass(frozen=True)
class Node:
    state: State
    box: Box


@dataclass(frozen=True)
class Route:
    """One drawn edge: ``points`` from the source's border to the target's, ``label_box``
    where its timing is written, ``rate_box`` (the first edge of a pair, on live pages)
    where the dashboard writes its rate."""

    source: str
    target: str
    kind: str
    label: str
    points: tuple[tuple[float, float], ...]
    label_box: Box | None
    rate_box: Box | None


@dataclass(frozen=True)
class Drawing:
    nodes: dict[str, Node]
    routes: list[Route]
    width: float
    height: float


@dataclass(eq=False)
class _View:
    """grandalf's view of a vertex: its size across ranks (``w``) and along them (``h``),
    since grandalf ranks top to bottom and this drawing goes left to right."""

    w: float
    h: float
    xy: tuple[float, float] = (0.0, 0.0)


@dataclass(eq=False)
class _Way:
    source: State
    target: State
    kind: str
    label: str
    rate: bool
    reversed: bool = False
    mid: GVertex | None = None
    halves: list[GEdge] = field(default_factory=list)


def node_width(state: State) -> float:
    return max(NODE_MIN_W, text_width(state.name, 13, bold=True) + 24)


def _label_size(way: _Way) -> tuple[float, float]:
    lines = [text for text in (way.label, RATE_TEXT if way.rate else "") if text]
    if not lines:
        return 0.0, 0.0
    return max(text_width(t, 11) for t in lines) + 6, LINE_H * len(lines) + 2


def _ways(graph: type[StateGraph], rates: bool) -> list[_Way]:
    ways: list[_Way] = []
    for source in graph.states.values():
        for target in source.children.values():
            for i, (kind, label) in enumerate(edge_kinds(source, target)):
                ways.append(_Way(source, target, kind, label, rates and i == 0))
    return ways


def _back_edges(graph: type[StateGraph]) -> set[tuple[str, str]]:
    """The edges that close a cycle in a depth-first walk from the initial state: drawn
    backwards, so that the rest ranks left to right."""
    back: set[tuple[str, str]] = set()
    colour: dict[str, int] = {}
    stack = [(graph.initial_state, iter(graph.initial_state.children.values()))]
    colour[graph.initial_state.name] = 1
    while stack:
        state, children = stack[-1]
        child = next(children, None)
        if child is None:
            colour[state.name] = 2
            stack.pop()
        elif colour.get(child.name) == 1:
            back.add((state.name, child.name))
        elif child.name not in colour:
            colour[child.name] = 1
            stack.append((child, iter(child.children.values())))
    return back


def layout(graph: type[StateGraph], *, rates: bool = False) -> Drawing:
    """The whole drawing's geometry; ``rates`` keeps room on each pair's first edge for the
    dashboard's live rate."""
    ways = _ways(graph, rates)
    loops = [w for w in ways if w.source is w.target]
    loop_room = {w.source.name: float(LOOP_H) for w in loops}
    for w in loops:
        loop_room[w.source.name] += _label_size(w)[1]
    loop_width = {w.source.name: 0.0 for w in loops}
    for w in loops:
        loop_width[w.source.name] = max(loop_width[w.source.name], _label_size(w)[0])
    vertices = {name: GVertex(name) for name in graph.states}
    for name, v in vertices.items():
        v.view = _View(NODE_H + loop_room.get(name, 0.0),
                       max(node_width(graph.states[name]), loop_width.get(name, 0.0)))
    back = _back_edges(graph)
    edges: list[GEdge] = []
    for w in ways:
        if w.source is w.target:
            continue
        w.reversed = (w.source.name, w.target.name) in back
        width, height = _label_size(w)
        w.mid = GVertex(w)
        w.mid.view = _View(height, width)
        first, last = vertices[w.source.name], vertices[w.target.name]
        if w.reversed:
            first, last = last, first
        w.halves = [GEdge(first, w.mid), GEdge(w.mid, last)]
        edges.extend(w.halves)
    g = GGraph(list(vertices.values()) + [w.mid for w in ways if w.mid is not None], edges)
    [core] = g.C
    sug = SugiyamaLayout(core)
    sug.xspace, sug.yspace = SIBLING_GAP, RANK_GAP
    sug.dw, sug.dh = LINE_GAP, 0
    sug.init_all(roots=[vertices[graph.initial_state.name]], inverted_edges=[])
    sug.draw(3)
    return _place(graph, ways, vertices, sug)


def _place(graph: type[StateGraph], ways: list[_Way], vertices: dict[str, GVertex],
           sug: SugiyamaLayout) -> Drawing:
    """grandalf's coordinates turned to left-to-right, shifted to the padding; then the
    edges routed through them."""
    views = [v.view for layer in sug.layers for v in layer]
    left = min(v.xy[1] - v.h / 2 for v in views)
    top = min(v.xy[0] - v.w / 2 for v in views)

    def box(view: _View) -> Box:
        return Box(view.xy[1] - view.h / 2 - left + PAD, view.xy[0] - view.w / 2 - top + PAD,
                   view.h, view.w)

    bands = []
    for layer in sug.layers:
        spans = [box(v.view) for v in layer]
        bands.append((min(b.x for b in spans), max(b.right for b in spans)))
    nodes = {}
    for name, v in vertices.items():
        slot = box(v.view)
        nodes[name] = Node(graph.states[name],
                           Box(slot.x, slot.bottom - NODE_H, slot.w, NODE_H))
    routes = _Router(sug, vertices, nodes, bands, box).route(ways)
    right = max([*(n.box.right for n in nodes.values()),
                 *(b.right for r in routes for b in (r.label_box, r.rate_box) if b)])
    bottom = max([*(n.box.bottom for n in nodes.values()),
                  *(y for r in routes for _, y in r.points)])
    return Drawing(nodes, routes, right + PAD, bottom + PAD)


class _Router:
    """Polylines through each edge's ranks, with each state's edges spread over its sides
    (ordered by where they go, so edges leaving one box do not cross each other there)."""

    def __init__(self, sug: SugiyamaLayout, vertices: dict[str, GVertex],
                 nodes: dict[str, Node], bands: list[tuple[float, float]],
                 box: Callable[[_View], Box]) -> None:
        self.sug, self.vertices, self.nodes, self.bands = sug, vertices, nodes, bands
        self.box = box

    def rank(self, v: object) -> int:
        return int(self.sug.grx[v].rank)

    def chain(self, w: _Way) -> list[object]:
        """The vertices an edge passes, rank by rank (grandalf's placeholders included)."""
        out: list[object] = []
        for half in w.halves:
            ctrl = self.sug.ctrls.get(half)
            a, b = half.v
            between = [ctrl[r] for r in range(self.rank(a) + 1, self.rank(b))] if ctrl else []
            out.extend([a, *between] if not out else [*between])
            out.append(b)
        return out

    def centre_y(self, v: object) -> float:
        b = self.box(v.view)  # type: ignore[attr-defined]
        if isinstance(getattr(v, "data", None), _Way):
            return float(b.bottom)
        return float(b.y + b.h / 2)

    def route(self, ways: list[_Way]) -> list[Route]:
        chains = {id(w): self.chain(w) for w in ways if w.mid is not None}
        ports: dict[tuple[str, int], list[tuple[float, int, int]]] = {}
        for w in ways:
            if w.mid is None:
                continue
            c = chains[id(w)]
            for end, side, toward in ((c[0], +1, c[1]), (c[-1], -1, c[-2])):
                name = str(end.data)  # type: ignore[attr-defined]
                ports.setdefault((name, side), []).append(
                    (self.centre_y(toward), id(w), 0 if end is c[0] else 1))
        port_y: dict[tuple[int, int], float] = {}
        for (name, _side), uses in ports.items():
            b = self.nodes[name].box
            for i, (_, wid, which) in enumerate(sorted(uses)):
                port_y[(wid, which)] = b.y + b.h * (i + 1) / (len(uses) + 1)
        routes = [self.through(w, chains[id(w)], port_y) for w in ways if w.mid is not None]
        loops: dict[str, list[_Way]] = {}
        for w in ways:
            if w.mid is None:
                loops.setdefault(w.source.name, []).append(w)
        for same in loops.values():
            routes.extend(self.loops(same))
        return routes

    def through(self, w: _Way, c: list[object], port_y: dict[tuple[int, int], float]
                ) -> Route:
        first = self.nodes[str(c[0].data)].box  # type: ignore[attr-defined]
        last = self.nodes[str(c[-1].data)].box  # type: ignore[attr-defined]
        y_start, y_end = port_y[(id(w), 0)], port_y[(id(w), 1)]
        points = [(first.right, y_start), (self.bands[self.rank(c[0])][1], y_start)]
        for v in c[1:-1]:
            lo, hi = self.bands[self.rank(v)]
            y = self.centre_y(v)
            points += [(lo, y), (hi, y)]
        points += [(self.bands[self.rank(c[-1])][0], y_end), (last.x, y_end)]
        if w.reversed:
            points.reverse()
        label_box = rate_box = None
        if w.mid is not None and (w.label or w.rate):
            slot = self.box(w.mid.view)
            y = slot.y + 1
            if w.label:
                label_box = Box(slot.x, y, slot.w, LINE_H)
                y += LINE_H
            if w.rate:
                rate_box = Box(slot.x, y, slot.w, LINE_H)
        return Route(w.source.name, w.target.name, w.kind, w.label,
                     _tidy(points), label_box, rate_box)

    def loops(self, loops: list[_Way]) -> Iterator[Route]:
        """Loops over their state's box, side by side; their labels stacked above them all,
        the first loop's lowest (the room was kept in the state's slot)."""
        b = self.nodes[loops[0].source.name].box
        half = min(16.0, b.w / (4 * len(loops)))
        y = b.y - LOOP_H
        for k, w in enumerate(loops):
            cx = b.x + b.w * (k + 1) / (len(loops) + 1)
            points = ((cx - half, b.y), (cx - half, b.y - LOOP_H + 4),
                      (cx + half, b.y - LOOP_H + 4), (cx + half, b.y))
            lw, lh = _label_size(w)
            y -= lh
            lx = min(max(cx - lw / 2, b.x), b.right - lw)
            label_box = Box(lx, y + 1, lw, LINE_H) if w.label else None
            rate_box = Box(lx, y + 1 + (LINE_H if w.label else 0), lw, LINE_H) if w.rate \
                else None
            yield Route(w.source.name, w.target.name, w.kind, w.label, points, label_box,
                        rate_box)


def _tidy(points: list[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """Drop repeated points and the middle of three in a row on one level line."""
    out: list[tuple[float, float]] = []
    for p in points:
        p = (round(p[0], 1), round(p[1], 1))
        if out and out[-1] == p:
            continue
        if len(out) >= 2 and out[-2][1] == out[-1][1] == p[1]:
            out[-1] = p
            continue
        out.append(p)
    return tuple(out)
