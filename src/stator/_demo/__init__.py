"""``stator demo``: a tiny social network run by a real worker on a throwaway SQLite file.

It exists to show, in half a minute and without any setup, what Stator is for: a handler
that writes rows of its own atomically with its transition (a post fanning out to one inbox
row per follower), a handler that talks to an unreliable remote server (retries with
backoff, ``TryAgainLater``, giving up into a ``fails_to`` state), and a worker that stops by
itself once nothing is left to do.  Everything runs through the public API, so this module
doubles as an end-to-end check of it.

The demo's tables are prefixed ``demo_`` and dropped at the start of every run, so the file
can be reused; nothing else in it is touched.

The parts: ``_models`` (the graphs and tables), ``_remote`` (the flaky server the handlers
call), ``_live`` (running the worker, drawing its progress), ``_tables`` (what is drawn: the
rows per state, the closing summary).
"""

from ._live import run_demo
from ._models import MAX_ATTEMPTS, Follower, Inbox, InboxStates, Post, PostStates
from ._remote import FlakyRemote, RemoteError
from ._tables import DemoSummary, summary_table

__all__ = [
    "MAX_ATTEMPTS",
    "DemoSummary",
    "FlakyRemote",
    "Follower",
    "Inbox",
    "InboxStates",
    "Post",
    "PostStates",
    "RemoteError",
    "run_demo",
    "summary_table",
]
