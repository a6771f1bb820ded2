"""``stator migrate`` and ``stator uninstall``: Stator's tables, and telling the launcher."""

from __future__ import annotations

import click
from sqlalchemy.exc import DBAPIError

from .._console import out, user_errors
from .._stator import Stator
from ..errors import StatorError
from ._app import app_command, load_app


@click.command()
@app_command
def migrate(app: str, db: str | None) -> None:
    """Create or upgrade Stator's tables and the models' Stator columns (idempotent)."""
    with user_errors():
        stator = load_app(app, db)
        done = stator.migrate()
        told = _restart_launcher(stator) if done else None
    if not done:
        out.print(f"{stator.url}: already up to date", highlight=False)
        return
    # One line: what changed, and the launcher only where there is one to tell.
    said = "; ".join([*done, *([told] if told else [])])
    out.print(f"{stator.url}: migrated ({said})", highlight=False)


def _restart_launcher(stator: Stator) -> str | None:
    """After a migration: tell the launcher (as TimescaleDB's CREATE/ALTER EXTENSION send restart),
    so a scheduler disabled for lack of schema starts, and a running one picks up the new
    schema.  The message is always left (a launcher elsewhere acts on it when it next reads
    this database's messages), but said only when a launcher is known: one listens in this
    directory, or one has answered this database before.  A failure to send does not undo
    the migration."""
    from .._launcher import send_message
    from .._launcher._discovery import key_of
    from .._launcher._messages import answered_before
    from .._launcher._place import DEFAULT_PLACE, poke

    try:
        sent = send_message(stator.engine, "restart")
        if poke(DEFAULT_PLACE, key_of(stator.engine.url)):
            return "sent restart to the launcher"
        if answered_before(stator.engine):
            return f"left restart message {sent.id} for the launcher"
    except (DBAPIError, StatorError) as exc:
        return f"could not send restart to the launcher: {exc}"
    return None


@click.command()
@app_command
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def uninstall(app: str, db: str | None, yes: bool) -> None:
    """Drop Stator's own tables (schema version, workers, stats, errors) and tell the
    launcher (restart: its scheduler then finds no schema and is disabled).  Your tables and
    their state columns stay."""
    with user_errors():
        stator = load_app(app, db)
        if not yes:
            click.confirm(f"drop Stator's tables from {stator.url}?", abort=True)
        done = stator.uninstall()
    for line in done:
        out.print(f"  {line}", highlight=False)
    out.print(f"{stator.url}: Stator's tables removed" if done else
              f"{stator.url}: nothing to remove", highlight=False)
