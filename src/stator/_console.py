"""What a Stator command shows on the terminal: its two consoles, the one ``error:`` line a
user mistake ends with, and the format of its log lines.

Shared by the ``stator`` command, the worker's serve loop (``_worker.serving``) and Django's
``runstator`` and ``stator`` commands, so that a mistake reads the same from each of them.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

from ._db_errors import database_errors, driver_error
from ._incurable import is_disk_full
from .errors import StatorError

if TYPE_CHECKING:
    from rich.console import Console

# The two consoles, ``err`` and ``out``, are made on first use (module ``__getattr__``), and
# rich is imported only then: a worker whose output is not a terminal (a service, a log file)
# writes plain lines and never loads it.
# Markup off: every text printed here may come from users, databases or exceptions, and rich
# would eat anything in it that looks like a tag ("[postgresql]") or die on it ("[/x]").
_consoles: dict[str, Console] = {}


def __getattr__(name: str) -> Console:
    if name not in ("err", "out"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _console(name)


def _console(name: str) -> Console:
    made = _consoles.get(name)
    if made is None:
        from rich.console import Console

        made = _consoles[name] = (
            Console(stderr=True, markup=False) if name == "err"
            else Console(markup=False, soft_wrap=True)  # a line piped to a file is not cut at 80
        )
    return made


def fail(message: str, code: int = 2) -> NoReturn:
    """End the command with one ``error:`` line and ``code`` (2: the user can fix it)."""
    error_line(message)
    sys.exit(code)


def error_line(message: str) -> None:
    """The ``error:`` line alone, for a caller that must leave some other way than
    ``sys.exit`` (a thread other than the main one)."""
    from rich.text import Text

    _console("err").print(Text.assemble(("error:", "bold red"), " ", message), highlight=False,
              soft_wrap=True)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn the errors a user can fix into one clear line instead of a traceback."""
    try:
        yield
    except StatorError as exc:
        fail(str(exc))
    except database_errors() as exc:
        orig = driver_error(exc)
        first = str(orig).strip().splitlines()[0] if orig else str(exc)
        if is_disk_full(exc) or "disk i/o error" in first.lower():
            fail(f"database error: {first}; is the disk that holds the database full "
                 "(df -h) or failing?")
        if getattr(exc, "statement", None) is None:  # it failed to connect at all
            first += ("; check the database URL (the APP's, or --db) and that the database "
                      "exists and is reachable")
        fail(f"database error: {first}", code=1)


def stderr_may_be_terminal() -> bool:
    """False where rich's ``Console.is_terminal`` would be for stderr (checked without rich):
    not a TTY, and neither ``TTY_COMPATIBLE=1`` nor ``FORCE_COLOR`` says otherwise."""
    if os.environ.get("TTY_COMPATIBLE") == "1" or os.environ.get("FORCE_COLOR"):
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # none, or closed
        return False


def setup_logging(level: str) -> None:
    """Rich's columns on a terminal; plain lines (no wrapping, no padding) in log files."""
    handler: logging.Handler
    if stderr_may_be_terminal() and _console("err").is_terminal:
        from rich.logging import RichHandler

        handler = RichHandler(console=_console("err"), show_path=False, rich_tracebacks=False)
        logging.basicConfig(level=level.upper(), format="%(message)s", handlers=[handler])
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%d %H:%M:%S"))
        logging.basicConfig(level=level.upper(), handlers=[handler])
