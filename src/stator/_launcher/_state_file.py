"""The launcher's state file: what ``stator launcher status`` and the dashboard read.

A snapshot of the launcher and of every database it knows (state, slot, scheduler process,
waits, restarts), written after each wake-up whose snapshot differs from the last one
written.  Times in it are wall-clock times, derived from the monotonic times the state
machine keeps, anchored once at start: the machine never reads the wall clock.  A file that
cannot be written is said once per outage, not once per wake-up.
"""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .._clock import Clock
from .._outage import Outage
from ._place import Place

if TYPE_CHECKING:
    from ._supervisor import Launcher

log = logging.getLogger("stator.launcher")


class StateFile:
    def __init__(self, place: Place, clock: Clock) -> None:
        self.place = place
        self.clock = clock
        self.mono0 = time.monotonic()
        self.wall0 = clock.now()
        self._last = ""
        self._outage = Outage("state file")

    def wall(self, mono: float | None) -> str | None:
        """A monotonic time as the wall-clock time it stands for (ISO 8601)."""
        if mono is None:
            return None
        return (self.wall0 + timedelta(seconds=mono - self.mono0)).isoformat()

    def snapshot(self, launcher: Launcher, *, running: bool = True) -> dict[str, Any]:
        now = time.monotonic()
        machine, wall = launcher.machine, self.wall
        databases = []
        for key in sorted(machine.entries):
            entry = machine.entries[key]
            child = launcher.children.get(key)
            since = entry.eligible_since()
            databases.append({
                "database": key,
                "state": entry.state.value,
                "slot": entry.holds_slot,
                "pid": child.pid if child else None,
                "proc_start": child.proc_start if child else None,
                "started_at": wall(child.started) if child else None,
                "starts": entry.starts,
                "restarts": entry.restarts,
                "last_exit": entry.last_exit,
                "last_error": entry.last_error,
                "wanted_at": wall(entry.wanted_at),
                "waiting_since": wall(since) if entry.wants_slot(now) else None,
                "backoff_until": (wall(entry.backoff_until)
                                  if entry.backoff_until > now else None),
                "wait_for_message": entry.wait_for,
                "total_wait": round(entry.total_wait, 3),
                "max_wait": round(entry.max_wait, 3),
                "discovered": key in launcher.targets,
            })
        pool = machine.pool
        return {
            "launcher": {
                "pid": os.getpid(),
                "running": running,
                "app": launcher.options.app,
                "control": str(self.place.path),
                "sources": [s.description for s in launcher.sources],
                "started_at": self.wall0.isoformat(),
                "max_workers": pool.capacity,
                "slots_used": pool.used,
                "slots_free": pool.free,
                "waiting": len(machine.waiting(now)),
                "exhaustion_episodes": machine.episodes,
                "polls": launcher.polls,
                "leftovers_stopped": launcher.leftovers_stopped,
            },
            "databases": databases,
        }

    def write(self, launcher: Launcher, *, running: bool = True) -> None:
        """Write the snapshot if it changed since the last one written."""
        state = self.snapshot(launcher, running=running)
        text = json.dumps(state, sort_keys=True)
        if text == self._last:
            return
        state["launcher"]["updated_at"] = self.clock.now().isoformat()
        try:
            self.place.write_state(state)
        except OSError as exc:
            if self._outage.failures == 0:
                log.warning("cannot write %s: %s", self.place.state_path, exc,
                            extra={"action": "state_write_failed"})
            self._outage.failures += 1
            return
        self._outage.recovered()
        self._last = text
