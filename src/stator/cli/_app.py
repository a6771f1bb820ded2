"""What the commands share: finding APP, its ``--db`` and ``--control`` options, and the
option types click lacks."""

from __future__ import annotations

import importlib
import math
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from sqlalchemy import URL

from .._stator import Stator
from ..errors import ConfigError, StatorError

LOG_LEVELS = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False)


class Seconds(click.FloatRange):
    """A number of seconds within a range, and finite: click's own range lets ``nan`` and
    ``inf`` through."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return number


def load_app(app: str, db: str | URL | None) -> Stator:
    """Import ``module:attribute`` and return its Stator, rebound to ``db`` if given."""
    module_name, sep, attr = app.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"APP must look like module:attribute (got {app!r})")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(
                f"cannot import {module_name!r} from APP {app!r}: no such module "
                f"(run stator from the directory that contains it, or fix PYTHONPATH)"
            ) from None
        raise ConfigError(_import_failure(app, module_name, exc)) from None
    except StatorError:
        raise  # an invalid graph or setting in the module: its message names the fix
    except Exception as exc:
        raise ConfigError(_import_failure(app, module_name, exc)) from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if callable(target) and not isinstance(target, Stator):
        target = target()
    if not isinstance(target, Stator):
        raise ConfigError(f"{app} is a {type(target).__name__}, not a stator.Stator")
    stator = target.with_db(db) if db else target
    _dispose_when_done(stator)
    return stator


def _dispose_when_done(stator: Stator) -> None:
    """Close the Stator's pooled connections when the command ends.  A command run in a
    process that goes on (tests, ``main`` called from code) would otherwise leave them to the
    garbage collector, which finds them open at some later, unrelated moment."""
    context = click.get_current_context(silent=True)
    if context is not None:
        context.call_on_close(stator.dispose)


def _import_failure(app: str, module_name: str, exc: Exception) -> str:
    """One line for an APP module that raised while being imported: what and where."""
    text = str(exc).strip().splitlines()
    what = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    where = ""
    if not isinstance(exc, SyntaxError):  # a SyntaxError's text already says where
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if not f.filename.startswith("<")]
        if frames:
            where = f" ({frames[-1].filename}, line {frames[-1].lineno})"
    return (
        f"cannot import APP {app!r}: {what}{where}; fix the module or install what it "
        f"imports (python -c 'import {module_name}' shows the traceback)"
    )


def app_command(func: Callable[..., Any]) -> Callable[..., Any]:
    """The APP argument and ``--db`` of every command that runs against an application."""
    func = click.option(
        "--db", metavar="URL", help="Run the same models against another database."
    )(func)
    return click.argument("app")(func)


def control_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--control``: where the launcher keeps its lock, state file and logs."""
    return click.option(
        "--control", type=click.Path(file_okay=False, path_type=Path),
        default=Path(".stator-launcher"), show_default=True,
        help="The launcher's control place (lock, state file, logs), relative to the "
             "current directory.",
    )(func)


def split_names(values: tuple[str, ...]) -> list[str]:
    """A repeatable option that also takes comma-separated names, as one list."""
    return [v.strip() for value in values for v in value.split(",") if v.strip()]
