"""The overview's throughput chart: transitions per minute over the last minutes, one bar a
minute, drawn on the server as inline SVG (no charting library to ship, nothing fetched).

The page refreshes itself from JSON, which names a bar by its key and says its height in
pixels (``bar_values``, the same arithmetic as the drawing): ``dashboard.js`` sets the bar's
``y`` and ``height``, and writes the numbers as text only, as it does every figure.
"""

from __future__ import annotations

from html import escape

WIDTH = 300  # the drawing's size, in px (it scales down with the page)
HEIGHT = 64
TOP = 14  # room for the peak's label above the bars
BOTTOM = 14  # room for the time axis below them
GAP = 2


def bar_heights(counts: list[int]) -> list[int]:
    """Each minute's bar height, the busiest minute the full height (nothing: no bars)."""
    room = HEIGHT - TOP - BOTTOM
    peak = max(counts, default=0)
    return [0 if peak <= 0 else round(room * max(n, 0) / peak) for n in counts]


def peak_text(counts: list[int]) -> str:
    return f"peak {max(counts, default=0):,}/min"


def bar_title(n: int, minutes_ago: int) -> str:
    when = "this minute" if minutes_ago == 0 else f"{minutes_ago} min ago"
    return f"{n:,} transitions {when}"


def bar_values(model: str, counts: list[int]) -> dict[str, str]:
    """The refreshing JSON's values for one model's chart."""
    values = {f"peak:{model}": peak_text(counts)}
    last = len(counts) - 1
    for i, (n, h) in enumerate(zip(counts, bar_heights(counts), strict=True)):
        values[f"bar:{model}:{i}"] = str(h)
        values[f"bartitle:{model}:{i}"] = bar_title(n, last - i)
    return values


def chart_svg(model: str, counts: list[int]) -> str:
    """The chart for one model's ``counts`` (oldest minute first)."""
    m = escape(model, quote=True)
    base = HEIGHT - BOTTOM
    step = WIDTH / max(len(counts), 1)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" role="img" xmlns="http://www.w3.org/2000/svg">',
        f"<title>transitions per minute, {m}, last {len(counts)} minutes</title>",
        f'<line class="axis" x1="0" y1="{base}" x2="{WIDTH}" y2="{base}"/>',
        f'<text class="peak" x="0" y="10" data-key="peak:{m}">{escape(peak_text(counts))}</text>',
    ]
    last = len(counts) - 1
    for i, (n, h) in enumerate(zip(counts, bar_heights(counts), strict=True)):
        x = round(i * step + GAP / 2, 1)
        parts.append(
            f'<rect class="bar" data-bar="{m}:{i}" data-base="{base}" x="{x}" y="{base - h}" '
            f'width="{round(step - GAP, 1)}" height="{h}">'
            f'<title data-key="bartitle:{m}:{i}">{escape(bar_title(n, last - i))}</title></rect>'
        )
    parts += [
        f'<text class="tick" x="0" y="{HEIGHT - 2}">{len(counts)} min ago</text>',
        f'<text class="tick" x="{WIDTH}" y="{HEIGHT - 2}" text-anchor="end">now</text>',
        "</svg>",
    ]
    return "".join(parts)
