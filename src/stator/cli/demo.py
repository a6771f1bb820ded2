"""``stator demo``: a tiny social network run live on a throwaway SQLite file."""

from __future__ import annotations

from pathlib import Path

import click

from .._console import out, user_errors


@click.command()
@click.option("--path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("stator-demo.db"), show_default=True,
              help="SQLite file to use (the demo's own tables in it are replaced).")
@click.option("--posts", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--followers", type=click.IntRange(min=1), default=25, show_default=True)
@click.option("--failure-rate", type=click.FloatRange(0, 0.95), default=0.3, show_default=True,
              help="Share of deliveries the simulated remote server fails.")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True)
def demo(path: Path, posts: int, followers: int, failure_rate: float, concurrency: int) -> None:
    """Fan posts out to followers' inboxes through a flaky simulated remote, live."""
    from .._demo import run_demo

    with user_errors():
        run_demo(path, posts=posts, followers=followers, failure_rate=failure_rate,
                 concurrency=concurrency, console=out)
