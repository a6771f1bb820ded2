"""The scheduler processes a launcher runs: at most one per database, each holding a slot.

The state machine decides (``_machine``) and the supervisor asks; this is where a decision
becomes a process started, asked to yield or terminated, and where a process's end is
noticed -- along with the schedulers a previous launcher left running, stopped at start so
that no database ever has two.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import URL

from .._clock import Clock
from ..errors import ConfigError
from . import _children
from ._children import Child, SchedulerCommand
from ._place import Place

log = logging.getLogger("stator.launcher")


class Schedulers:
    def __init__(self, command: SchedulerCommand, place: Place, clock: Clock, grace: float,
                 on_exit: Callable[[], None]) -> None:
        self.command = command
        self.place = place
        self.clock = clock
        self.grace = grace  # seconds a scheduler asked to stop has before it is killed
        self.on_exit = on_exit  # called from a watcher thread when a scheduler ends
        self.running: dict[str, Child] = {}

    def start(self, key: str, url: URL, wait_for: int | None) -> Child:
        """Start ``key``'s scheduler (``OSError`` if it cannot be)."""
        child = _children.spawn(
            self.command, key, url, wait_for, self.place.log_path(key), self.on_exit,
            when=self.clock.now().isoformat(),
        )
        self.running[key] = child
        log.info("started scheduler for %s (pid %d)%s", key, child.pid,
                 f", after message {wait_for}" if wait_for is not None else "",
                 extra={"action": "scheduler_start"})
        return child

    def terminate(self, key: str) -> None:
        child = self.running.pop(key, None)
        if child is not None:
            code = _children.terminate(child, self.grace)
            log.info("stopped scheduler for %s (pid %d, exit code %d)", key,
                     child.pid, code, extra={"action": "scheduler_stop"})

    def ask_to_yield(self, key: str) -> None:
        child = self.running.get(key)
        if child is not None:
            child.yield_asked = True
            _children.ask_to_stop(child, self.grace)
            log.info("%s: scheduler (pid %d) yields its slot to a waiting database",
                     key, child.pid, extra={"action": "scheduler_yield"})

    def ended(self) -> list[tuple[str, Child, int]]:
        """The schedulers that have ended since the last call (key, process, exit code);
        those past their kill deadline are killed first."""
        ended = []
        for key, child in list(self.running.items()):
            _children.enforce_deadline(child)
            code = child.exit_code()
            if code is None:
                continue
            del self.running[key]
            _children.close(child)
            ended.append((key, child, code))
        return ended

    def kill_deadlines(self) -> list[float]:
        return [c.kill_at for c in self.running.values() if c.kill_at is not None]

    def stop_leftovers(self) -> int:
        """Stop the schedulers a previous launcher's state file names, if they still run
        (and are still ours); how many were stopped."""
        try:
            previous = self.place.read_state()
        except ConfigError:
            previous = None
        stopped = 0
        for db in (previous or {}).get("databases", []):
            pid, proc_start = db.get("pid"), db.get("proc_start")
            if isinstance(pid, int) and _children.stop_leftover(pid, proc_start, self.grace):
                stopped += 1
                log.warning("stopped scheduler pid %d for %s left by a previous launcher",
                            pid, db.get("database"), extra={"action": "leftover_stopped"})
        return stopped

    def stop_all(self, reason: str) -> None:
        children = list(self.running.values())
        if children:
            log.info("stopping %d scheduler(s) (%s)", len(children), reason,
                     extra={"action": "launcher_stop"})
        _children.terminate_all(children, self.grace)
        self.running.clear()
