"""Print what makes the package hard to hold: import cycles, oversized modules, and database
vendor branches outside the one module meant to hold them.

    python scripts/layout_report.py            # report, exit 0
    python scripts/layout_report.py --check    # exit 1 when anything is over its limit

Imports are read from the source (``ast``), both those at the top of a module and those made
inside functions: a lazy import hides a cycle from Python, not from a reader.  A module and
the package ``__init__`` it lives in are separate nodes.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "stator"
MAX_LINES = 400
# Where database vendor differences are allowed to live.
DIALECT_HOMES = {"stator._store._dialects"}  # and its submodules
VENDOR_BRANCH = re.compile(
    r"""(dialect\.name|\.vendor|dialect_name|\bvendor)\s*(==|!=|in\b)|"""
    r"""(==|!=)\s*["'](postgresql|sqlite)["']"""
)


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, bool]]:
    """(module imported, whether the import is lazy: inside a function)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    lazy_nodes = {
        id(inner) for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        if _under_type_checking(tree, node):
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target, id(node) in lazy_nodes


def _under_type_checking(tree: ast.Module, node: ast.AST) -> bool:
    for top in ast.walk(tree):
        if (isinstance(top, ast.If) and isinstance(top.test, ast.Name)
                and top.test.id == "TYPE_CHECKING"
                and any(node is inner for inner in ast.walk(top))):
            return True
    return False


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if over any limit")
    args = parser.parse_args()
    known = modules()
    graph: dict[str, set[str]] = {}
    lazy = 0
    for name, path in known.items():
        for target, is_lazy in imported(name, path, known):
            # A package imports its own submodules to re-export them: that is no cycle.
            if name == target.rpartition(".")[0] and path.name == "__init__.py":
                continue
            graph.setdefault(name, set()).add(target)
            lazy += is_lazy
    loops = cycles(graph)
    big = sorted(((len(p.read_text().splitlines()), n) for n, p in known.items()), reverse=True)
    big = [(lines, n) for lines, n in big if lines > MAX_LINES]
    branches = [
        (n, i, line.strip())
        for n, p in known.items()
        if n not in DIALECT_HOMES and n.rpartition(".")[0] not in DIALECT_HOMES
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if VENDOR_BRANCH.search(line) and not line.lstrip().startswith("#")
    ]
    print(f"import cycles: {len(loops)} ({lazy} imports made inside functions)")
    for loop in loops:
        print("  " + " <-> ".join(loop))
    print(f"modules over {MAX_LINES} lines: {len(big)}")
    for lines, n in big:
        print(f"  {lines:5d}  {n}")
    print(f"vendor branches outside {', '.join(sorted(DIALECT_HOMES))}: {len(branches)}")
    for n, i, line in branches:
        print(f"  {n}:{i}: {line[:100]}")
    return 1 if args.check and (loops or big or branches) else 0


if __name__ == "__main__":
    sys.exit(main())
