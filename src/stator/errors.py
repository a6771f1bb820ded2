"""Every exception Stator raises on purpose.

The tree, so callers can catch as broadly or as narrowly as they need::

    StatorError
    ├── GraphError            a state graph is invalid (raised when its class is defined)
    ├── TransitionError       a transition the graph does not allow from the row's state
    │   └── TransitionConflict  the row was moved by someone else first (the race was lost)
    ├── SchemaError           the database lacks Stator's tables or columns; says how to fix it
    ├── ConfigError           a bad URL, APP path or option
    └── PlainRowError         a handler set an attribute of a plain row (also an AttributeError)

``TryAgainLater`` is not an error: a handler raises it to say "not yet", which costs the row
no attempt and no backoff.
"""

from __future__ import annotations


class StatorError(Exception):
    """Base class of every error raised by Stator itself."""


class GraphError(StatorError):
    """A state graph breaks one of the rules checked when its class is created."""


class TransitionError(StatorError):
    """A row was asked to move along an edge its graph does not have."""


class TransitionConflict(TransitionError):
    """The row changed underneath the caller: another writer moved it first."""


class SchemaError(StatorError):
    """The database is not ready for Stator; the message names the command that fixes it."""


class ConfigError(StatorError):
    """User input (a URL, an APP path, an option) cannot be used."""


class PlainRowError(StatorError, AttributeError):
    """A handler set (or deleted) an attribute of a plain row, which is read-only: the
    message names the state and how to opt out (``State(plain_rows=False)``)."""


class TryAgainLater(Exception):
    """Raised by a handler to stay in the current state without penalty.

    ``delay`` overrides the state's ``retry_after`` for this one time, in seconds.
    """

    def __init__(self, delay: float | None = None) -> None:
        super().__init__(delay)
        if delay is not None and delay < 0:
            raise ValueError("TryAgainLater delay must be >= 0 seconds")
        self.delay = delay
