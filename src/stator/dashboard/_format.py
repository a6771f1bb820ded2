"""How the dashboard writes figures, ages and URL path segments: shared by the templates
(as Jinja filters) and the JSON the pages refresh themselves from, so both say the same."""

from __future__ import annotations

from urllib.parse import quote


def part(value: object) -> str:
    """``value`` as one URL path segment: ``/``, ``?``, ``#`` and ``%`` encoded too."""
    return quote(str(value), safe="")


def age(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def figure(n: int, estimated: bool = False) -> str:
    return f"≈{n:,}" if estimated else f"{n:,}"
