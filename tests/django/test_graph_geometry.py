"""The drawn state graph, measured from its SVG: no edge runs through a box other than its
own ends, no two edges share a stretch of path, every label lies inside the drawing, on no
box, no other label and no edge.  Checked for every graph the tests define, the task
graph, graphs shaped like a federated server's, and random small graphs."""

from __future__ import annotations

import importlib
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import combinations, pairwise
from pathlib import Path

import pytest
from graph_zoo import ZOO, OrderStates, TaskStates
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stator import State, StateGraph
from stator._graph import role
from stator._graph_layout import Box, text_width
from stator._graph_svg import to_svg

TESTS = Path(__file__).resolve().parents[1]
SVG = "{http://www.w3.org/2000/svg}"
Point = tuple[float, float]


def graphs_the_tests_define() -> list[type[StateGraph]]:
    """Every StateGraph class at the top level of a module under tests/ (imported as the
    test run imports it; a module that cannot be imported here is an error, not a skip)."""
    found: dict[int, type[StateGraph]] = {}
    for file in sorted(TESTS.rglob("*.py")):
        if "StateGraph)" not in file.read_text():
            continue
        root = file.parent  # as pytest imports it: from the first folder not a package
        while (root / "__init__.py").exists():
            root = root.parent
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
        name = ".".join(file.relative_to(root).with_suffix("").parts)
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, StateGraph) \
                    and value is not StateGraph and value.__module__ == module.__name__:
                found[id(value)] = value
    return list(found.values())


# -- reading the SVG back ------------------------------------------------------------------


@dataclass
class Drawn:
    width: float
    height: float
    nodes: dict[str, Box]
    edges: list[tuple[str, str, list[Point]]]
    labels: list[tuple[str, Box]]


def read(svg: str) -> Drawn:
    root = ET.fromstring(svg)
    nodes: dict[str, Box] = {}
    edges: list[tuple[str, str, list[Point]]] = []
    labels: list[tuple[str, Box]] = []
    for g in root.iter(f"{SVG}g"):
        cls = g.get("class", "").split()
        if "node" in cls:
            rect = g.find(f"{SVG}rect")
            assert rect is not None
            name = g.findtext(f"{SVG}text") or ""
            nodes[name] = Box(*(float(rect.get(a, "0")) for a in ("x", "y", "width", "height")))
        elif "edge" in cls:
            path = g.find(f"{SVG}path")
            assert path is not None
            edges.append((g.get("data-from", ""), g.get("data-to", ""),
                          polyline(path.get("d", ""))))
            for text in g.iter(f"{SVG}text"):
                shown = text.text or ("9999.9/min" if "rate" in text.get("class", "") else "")
                x, y = float(text.get("x", "0")), float(text.get("y", "0"))
                w = text_width(shown, 11)
                labels.append((shown, Box(x - w / 2, y - 11, w, 14)))
    for text in root.iter(f"{SVG}text"):  # the legend is a label like the others
        if text.get("class") == "legend":
            x, y = float(text.get("x", "0")), float(text.get("y", "0"))
            labels.append((text.text or "", Box(x, y - 11, text_width(text.text or "", 11), 14)))
    return Drawn(float(root.get("width", "0")), float(root.get("height", "0")), nodes, edges,
                 labels)


def polyline(d: str) -> list[Point]:
    """The path's points; a cubic curve (a loop) flattened into short segments."""
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", d)]
    points = list(zip(numbers[::2], numbers[1::2], strict=True))
    if "C" not in d:
        return points
    p0, p1, p2, p3 = points
    return [tuple(  # type: ignore[misc]
        (1 - t) ** 3 * a + 3 * (1 - t) ** 2 * t * b + 3 * (1 - t) * t * t * c + t ** 3 * e
        for a, b, c, e in zip(p0, p1, p2, p3, strict=True))
        for t in (i / 24 for i in range(25))]


def segments(points: list[Point]) -> Iterator[tuple[Point, Point]]:
    return pairwise(points)


def crosses(a: Point, b: Point, box: Box, margin: float = 1.0) -> bool:
    """Whether segment a-b enters the box's interior (shrunk by ``margin``): clipped
    against the box (Liang-Barsky)."""
    x0, y0, x1, y1 = box.x + margin, box.y + margin, box.right - margin, box.bottom - margin
    if x0 >= x1 or y0 >= y1:
        return False
    dx, dy = b[0] - a[0], b[1] - a[1]
    lo, hi = 0.0, 1.0
    for p, q in ((-dx, a[0] - x0), (dx, x1 - a[0]), (-dy, a[1] - y0), (dy, y1 - a[1])):
        if p == 0:
            if q <= 0:
                return False
        else:
            t = q / p
            if p < 0:
                lo = max(lo, t)
            else:
                hi = min(hi, t)
    return lo < hi


def shared(s: tuple[Point, Point], t: tuple[Point, Point]) -> bool:
    """Whether two segments overlap along a stretch (collinear, overlapping > 1 px)."""
    (ax, ay), (bx, by) = s
    (cx, cy), (dx, dy) = t
    ux, uy = bx - ax, by - ay
    length = (ux * ux + uy * uy) ** 0.5
    if length == 0:
        return False
    for px, py in ((cx, cy), (dx, dy)):
        if abs(ux * (py - ay) - uy * (px - ax)) / length > 0.5:
            return False
    ts = sorted([0.0, length])
    project = sorted(((px - ax) * ux + (py - ay) * uy) / length for px, py in ((cx, cy), (dx, dy)))
    return min(ts[1], project[1]) - max(ts[0], project[0]) > 1.0


def problems(graph: type[StateGraph], svg: str) -> list[str]:
    d = read(svg)
    found: list[str] = []
    assert set(d.nodes) == set(graph.states)
    for (a, abox), (b, bbox) in combinations(d.nodes.items(), 2):
        if abox.overlaps(bbox):
            found.append(f"{a} on {b}")
    for source, target, points in d.edges:
        for s in segments(points):
            for name, box in d.nodes.items():
                if name not in (source, target) and crosses(*s, box):
                    found.append(f"{source}->{target} crosses {name}")
            for text, box in d.labels:
                if crosses(*s, box):
                    found.append(f"{source}->{target} crosses label {text!r}")
    for (s1, t1, p1), (s2, t2, p2) in combinations(d.edges, 2):
        if any(shared(a, b) for a in segments(p1) for b in segments(p2)):
            found.append(f"{s1}->{t1} and {s2}->{t2} share a path")
    canvas = Box(0, 0, d.width, d.height)
    for i, (text, box) in enumerate(d.labels):
        if not (box.x >= canvas.x and box.y >= canvas.y and box.right <= canvas.right
                and box.bottom <= canvas.bottom):
            found.append(f"{text!r} outside the drawing")
        for name, node in d.nodes.items():
            if box.overlaps(node):
                found.append(f"{text!r} on {name}")
        for other, obox in d.labels[i + 1:]:
            if box.overlaps(obox):
                found.append(f"{text!r} on {other!r}")
    return found


def drawings(graph: type[StateGraph]) -> Iterator[str]:
    """As the dashboard draws it (room for live rates) and as the admin does."""
    roles = {name: role(state) for name, state in graph.states.items()}
    yield to_svg(graph, roles)
    yield to_svg(graph, roles, current=graph.initial_state.name, captions=roles, rates=False)


# -- the graphs ------------------------------------------------------------------------------

DEFINED = graphs_the_tests_define()


def test_the_graphs_of_the_tests_are_found() -> None:
    names = {g.__name__ for g in DEFINED}
    assert {"Flow", "Ticket", "OrderStates", "JobStates"} <= names and len(DEFINED) >= 50


@pytest.mark.parametrize("graph", DEFINED + ZOO, ids=lambda g: f"{g.__module__}.{g.__name__}")
def test_the_drawing_is_clean(graph: type[StateGraph]) -> None:
    for svg in drawings(graph):
        assert problems(graph, svg) == []


def test_parallel_edges_are_drawn_apart_and_labelled() -> None:
    svg = to_svg(OrderStates, {}, rates=False)
    d = read(svg)
    pair = [points for source, target, points in d.edges
            if (source, target) == ("new", "cancelled")]
    assert len(pair) == 2 and pair[0] != pair[1]
    assert [text for text, _ in d.labels][:-1] == ["after 7d"]
    task = read(to_svg(TaskStates, {}, rates=False))
    assert [text for text, _ in task.labels][:-1] == ["after 3 failures"]
    # The task graph's failure edges end at "failed", and nothing runs through "successful";
    # no "running" state (a running task is a ready one under a lease, see docs/tasks.md).
    assert sum(1 for s, t, _ in task.edges if t == "failed") == 2
    assert {s for s, _, _ in task.edges} == {"ready"}


def test_external_and_terminal_states_are_marked_and_explained() -> None:
    svg = to_svg(OrderStates, {})
    assert re.search(r'id="node-packed"[^>]*>.*?stroke-dasharray', svg)
    assert svg.count('class="inner"') == 2  # shipped and cancelled: double borders
    assert "dashed box: moved on by application code" in svg and "dashed line: timeout" in svg


def test_the_drawing_does_not_change_between_runs() -> None:
    assert len({to_svg(TaskStates, {}) for _ in range(3)}) == 1


# -- random small graphs ----------------------------------------------------------------------


@st.composite
def small_graphs(draw: st.DrawFn) -> type[StateGraph]:
    n = draw(st.integers(1, 7))
    names = [f"s{i}" + "x" * draw(st.integers(0, 12)) for i in range(n)]
    edges = {(draw(st.integers(0, i - 1)), i) for i in range(1, n)}  # all reachable
    edges |= set(draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                               max_size=2 * n)))
    sources = {a for a, _ in edges}
    timed = draw(st.lists(st.sampled_from(sorted(edges)), max_size=3, unique=True)) \
        if edges else []
    exhausted = draw(st.lists(st.sampled_from(sorted(edges)), max_size=3, unique=True)) \
        if edges else []
    timed = list(dict(timed).items())  # one timeout a state
    exhausted = list(dict(exhausted).items())  # one give-up state a state
    external = {i for i in sources if draw(st.booleans())} - {a for a, _ in exhausted}
    states = [State(force_initial=(i == 0), externally_progressed=i in external,
                    max_attempts=3 if any(a == i for a, _ in exhausted) else None)
              for i in range(n)]
    by_source: dict[int, list[int]] = {}
    for a, b in sorted(edges):
        by_source.setdefault(a, []).append(b)
    for a, targets in by_source.items():
        for b in targets:
            states[a].transitions_to(states[b])
    for a, b in timed:
        states[a].times_out_to(states[b], seconds=draw(st.sampled_from([60, 3600, 7 * 86400])))
    for a, b in exhausted:
        states[a].fails_to(states[b])
    body: dict[str, object] = dict(zip(names, states, strict=True))
    for i in sources - external:
        body[f"check_{names[i]}"] = classmethod(lambda cls, row: None)
    return type("Random", (StateGraph,), body)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_graphs())
def test_random_small_graphs_are_drawn_clean(graph: type[StateGraph]) -> None:
    for svg in drawings(graph):
        assert problems(graph, svg) == []
