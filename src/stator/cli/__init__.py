"""The ``stator`` command, one module per command group:

- ``worker``: ``run``, a worker served by the runtime's ``serve`` (``_worker.serving``);
- ``schema``: ``migrate`` and ``uninstall``;
- ``status`` and ``graph``: what is in the database, and the graphs as text;
- ``launcher``: ``launcher``, ``ctl``, ``launcher-status`` and the scheduler it starts;
- ``dashboard``, ``bench``, ``demo``: the web dashboard, the benchmarks, the demo;
- ``_app``: finding APP and the options the commands share.

``APP`` is ``module:attribute`` naming a ``Stator`` (or a function returning one), found the
way uvicorn and celery find apps: relative to the current directory.  User mistakes (a bad
APP, URL or option, a database not migrated) end with one ``error:`` line naming the fix and
exit code 2; no traceback.
"""

from __future__ import annotations

import sys

import click

from .._console import fail
from . import bench, dashboard, demo, graph, launcher, schema, status, worker

__all__ = ["cli", "main"]


@click.group()
@click.version_option(package_name="stator-engine")
def cli() -> None:
    """Durable state machines stored in your application's own database."""


# The modules keep their names (``stator.cli.dashboard`` is the module, its command is
# ``dashboard.dashboard``), so a test or a reader reaches a command's helpers by its module.
for _command in (schema.migrate, worker.run, status.status, graph.graph, launcher.launcher,
                 launcher.ctl, launcher.launcher_status, launcher.launcher_scheduler,
                 schema.uninstall, demo.demo, bench.bench, dashboard.dashboard):
    cli.add_command(_command)


def main(args: list[str] | None = None, prog_name: str = "stator") -> None:
    """The console entry point: click's own usage errors get the same single ``error:``
    line as every other user mistake."""
    if not (sys.argv[1:] if args is None else args):
        args = ["--help"]  # a bare `stator` shows what it can do
    try:
        code = cli.main(args=args, prog_name=prog_name, standalone_mode=False)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else prog_name
        fail(f"{exc.format_message()} (see '{where} --help')", exc.exit_code)
    except click.ClickException as exc:
        fail(exc.format_message(), exc.exit_code)
    except click.Abort:
        fail("aborted", 1)
    sys.exit(code if isinstance(code, int) else 0)
