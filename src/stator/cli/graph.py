"""``stator graph``: the state graphs as Mermaid or Graphviz text."""

from __future__ import annotations

import click

from .._console import user_errors
from .._stator import Stator
from ._app import app_command, load_app


@click.command()
@app_command
@click.option("--format", "fmt", type=click.Choice(["mermaid", "dot"]), default="mermaid",
              show_default=True)
def graph(app: str, db: str | None, fmt: str) -> None:
    """Print the state graphs as a Mermaid or Graphviz diagram."""
    with user_errors():
        stator = load_app(app, db)
    print_graphs(stator, fmt)


def print_graphs(stator: Stator, fmt: str) -> None:
    """Each distinct graph once (``stator graph``, ``manage.py stator graph``)."""
    from .._graph_text import to_dot, to_mermaid

    graphs = list(dict.fromkeys(m.state_graph for m in stator.models))  # type: ignore[attr-defined]
    click.echo(to_mermaid(graphs) if fmt == "mermaid" else to_dot(graphs))
