"""Where the launcher sleeps between wake-ups, and what ends the sleep early.

One selector over a self-pipe and the control place's wake-up FIFO.  The self-pipe is
written (``ring``) by whatever learns of something from another thread or a signal handler
-- a child watcher, the PostgreSQL listener, ``Launcher.stop`` -- so the loop never polls;
the FIFO carries the names of databases that another process says have messages.
"""

from __future__ import annotations

import contextlib
import os
import selectors
from collections.abc import Callable


class Alarm:
    def __init__(self) -> None:
        self._pipe_r, self._pipe_w = os.pipe()
        for fd in (self._pipe_r, self._pipe_w):
            os.set_blocking(fd, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._pipe_r, selectors.EVENT_READ, "pipe")
        self._fifo: Callable[[], list[str]] | None = None

    def watch_fifo(self, fd: int, read: Callable[[], list[str]]) -> None:
        """Also wake when ``fd`` (the FIFO) is readable; ``read`` takes its lines."""
        self._selector.register(fd, selectors.EVENT_READ, "fifo")
        self._fifo = read

    def ring(self) -> None:
        """End the current or next sleep (safe from a signal handler or another thread)."""
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._pipe_w, b"x")

    def sleep(self, seconds: float) -> list[str]:
        """Sleep up to ``seconds``, until rung or written to; the FIFO's lines, if any."""
        lines: list[str] = []
        for key, _events in self._selector.select(seconds):
            if key.data == "pipe":
                with contextlib.suppress(BlockingIOError, OSError):
                    while os.read(self._pipe_r, 4096):
                        pass
            elif key.data == "fifo" and self._fifo is not None:
                lines.extend(self._fifo())
        return lines

    def close(self) -> None:
        self._selector.close()
        for fd in (self._pipe_r, self._pipe_w):
            with contextlib.suppress(OSError):
                os.close(fd)
