"""The launcher's supervisor: one process running one scheduler per database.

Each wake-up (``step``) it reaps schedulers that ended, rediscovers the databases (at most
once per ``--poll-every``), reads the messages of the databases that may have some (all of
them every ``--discover-every``), lets the state machine take its automatic transitions,
carries out the machine's effects on real processes (``_processes``), and writes the state
file (``_state_file``).  Then it sleeps (``_alarm``) -- on a self-pipe written by child
watchers, the PostgreSQL listener, the wake-up FIFO and signal handlers -- until the
earliest of those events or of its own deadlines (the next full round, a SQLite change
check, a database's next due time, a slice running out).  Nothing spins: every wait is on a
condition with a timeout.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence

from sqlalchemy.exc import SQLAlchemyError

from .._clock import Clock, SystemClock
from .._outage import Outage, short
from ..errors import ConfigError
from . import _children
from ._alarm import Alarm
from ._children import EXIT_IDLE, EXIT_NO_SCHEMA, Child, SchedulerCommand
from ._discovery import (
    Source,
    Target,
    discover_source,
    explicit_source,
    key_of,
    normalize,
)
from ._listener import Listener
from ._machine import Backoff, Machine, Outcome
from ._options import LauncherOptions
from ._place import Place
from ._processes import Schedulers
from ._state_file import StateFile
from ._steps import Action, DbState, Message, Trigger
from ._tenant import Tenant

log = logging.getLogger("stator.launcher")

RETRY_START = 1.0  # seconds before trying again to start a scheduler that failed to start
IDLE_RECHECK = 1.0  # least wait before restarting a scheduler that has just gone idle


class Launcher:
    def __init__(self, options: LauncherOptions, models: Sequence[type], *,
                 clock: Clock | None = None) -> None:
        if options.max_workers < 2:
            raise ConfigError("--max-workers must be at least 2: one slot for the launcher "
                              "itself, one for a scheduler")
        self.options = options
        self.models = list(models)
        self.sources: list[Source] = [
            *(discover_source(d, options.cwd) for d in options.discover),
            *(explicit_source(u, options.cwd) for u in options.databases),
        ]
        if not self.sources:
            raise ConfigError("nothing to launch: give --discover PATTERN and/or --db URL")
        self.machine = Machine(
            options.max_workers, backoff=Backoff(options.backoff_floor, options.backoff_max),
            slice_seconds=options.slice,
        )
        self.place = Place(options.cwd / options.control)
        self.clock = clock or SystemClock()
        command = SchedulerCommand(
            app=options.app, idle_window=options.idle_window,
            concurrency=options.concurrency, log_level=options.log_level, cwd=options.cwd,
        )
        self.schedulers = Schedulers(command, self.place, self.clock, options.stop_grace,
                                     self.poke)
        self.targets: dict[str, Target] = {}
        self.tenants: dict[str, Tenant] = {}
        self.children = self.schedulers.running
        self.polls = 0
        self.leftovers_stopped = 0
        self._stop = threading.Event()
        self._stop_reason = ""
        self._alarm = Alarm()
        self._listener: Listener | None = None
        self._scanned: dict[int, dict[str, Target]] = {}
        self._scan_outages = [Outage(f"discovery ({s.description})") for s in self.sources]
        self._read_outages: dict[str, Outage] = {}
        self._messages_due: set[str] = set()
        self._work_due: set[str] = set()
        self._next_discovery = 0.0
        self._next_scan = 0.0
        self._next_stat = 0.0
        self.state_file = StateFile(self.place, self.clock)

    # -- running -----------------------------------------------------------------------------

    def run(self) -> None:
        """Hold the control place and supervise until ``stop``; then stop every scheduler."""
        self.place.acquire()
        try:
            self.leftovers_stopped = self.schedulers.stop_leftovers()
            self._alarm.watch_fifo(self.place.open_wake(), self.place.read_wake)
            log.info(
                "launcher pid %d: %s, max %d workers (the launcher holds one), control %s",
                os.getpid(), ", ".join(s.description for s in self.sources),
                self.options.max_workers, self.place.path, extra={"action": "launcher_start"},
            )
            while not self._stop.is_set():
                self._heard_on_fifo(self._alarm.sleep(self.step()))
        finally:
            self._shutdown()
            self.place.release()

    def stop(self, reason: str = "stopped") -> None:
        """Ask the loop to end (safe from a signal handler or another thread)."""
        if not self._stop.is_set():
            self._stop_reason = reason
            self._stop.set()
        self.poke()

    def poke(self) -> None:
        self._alarm.ring()

    def step(self) -> float:
        """One wake-up's work; returns how long the loop may sleep before the next one."""
        now = time.monotonic()
        self._reap(now)
        # Discovery on every wake-up (as in TimescaleDB), at most once per --poll-every; a full
        # round -- every database's messages and next due time -- every --discover-every.
        full = now >= self._next_discovery
        if full or now >= self._next_scan:
            self._discover(now)
            self._next_scan = now + min(self.options.poll_every, self.options.discover_every)
        if full:
            self._next_discovery = now + self.options.discover_every
        if now >= self._next_stat:
            for tenant in self.tenants.values():
                if tenant.changed():
                    self._messages_due.add(tenant.key)
                    self._work_due.add(tenant.key)
            self._next_stat = now + self.options.poll_every
        if self._listener is not None:
            for key, channels in self._listener.take().items():
                if "stator" in channels:
                    self._work_due.add(key)
                if channels - {"stator"}:
                    self._messages_due.add(key)
        keys = set(self.tenants) if full else self._messages_due & set(self.tenants)
        self._messages_due.clear()
        for key in sorted(keys):
            self._read_messages(key, now)
        self._refresh_due(set(self.tenants) if full else self._work_due, now)
        self._work_due.clear()
        self._execute(self.machine.automatic(time.monotonic()))
        self._update_listener()
        if full:
            self.polls += 1
        self.state_file.write(self)
        return self._sleep_time(time.monotonic())

    def _heard_on_fifo(self, lines: list[str]) -> None:
        for line in lines:
            try:
                key = key_of(normalize(line, self.options.cwd))
            except ConfigError:
                key = ""
            if key in self.tenants:
                self._messages_due.add(key)
            else:  # not a database we know by that name: look at all of them
                self._messages_due.update(self.tenants)

    def _sleep_time(self, now: float) -> float:
        times = [self._next_discovery]
        if any(t.target.path is not None for t in self.tenants.values()):
            times.append(self._next_stat)
        deadline = self.machine.next_deadline(now)
        if deadline is not None:
            times.append(deadline)
        times.extend(self.schedulers.kill_deadlines())
        if any(e.state is DbState.ALLOCATED for e in self.machine.entries.values()):
            times.append(now + RETRY_START)
        return max(min(times) - now, 0.0)

    # -- discovery ---------------------------------------------------------------------------

    def _discover(self, now: float) -> None:
        found: dict[str, Target] = {}
        for i, source in enumerate(self.sources):
            outage = self._scan_outages[i]
            try:
                self._scanned[i] = source.scan()
            except (SQLAlchemyError, OSError) as exc:
                outage.failed(exc)  # logged once per outage; keep the last answer
            else:
                outage.recovered()
            found.update(self._scanned.get(i, {}))
        for key in sorted(self.targets.keys() - found.keys()):
            self._drop(key, now)
        for key in sorted(found.keys() - self.targets.keys()):
            self._register(found[key], now)

    def _register(self, target: Target, now: float) -> None:
        tenant = Tenant(target, self.models)
        self.targets[target.key] = target
        self.tenants[target.key] = tenant
        log.info("found %s", target.key, extra={"action": "database_found"})
        # Pending messages first: a `stop` sent before we saw the database keeps it stopped.
        self._read_messages(target.key, now)
        if target.key in self.machine.entries:
            return
        wanted = self._probe(tenant, now, check_schema=True)
        self._execute(self.machine.discovered(target.key, now, wanted))

    def _drop(self, key: str, now: float) -> None:
        log.info("%s is gone: stopping its scheduler", key, extra={"action": "database_gone"})
        self._execute(self.machine.drop(key, now))
        self.targets.pop(key, None)
        self._read_outages.pop(key, None)
        tenant = self.tenants.pop(key, None)
        if tenant is not None:
            tenant.dispose()

    def _probe(self, tenant: Tenant, now: float, *, check_schema: bool = False) -> float | None:
        """When the database next needs a scheduler (monotonic seconds), None for "not until
        a wake-up".  Anything doubtful -- a schema problem, an error -- means now: the
        scheduler is the one that decides (and exits at once if there is no schema)."""
        try:
            if check_schema and tenant.problems():
                return now
            due = tenant.next_due()
        except (SQLAlchemyError, OSError):
            return now
        if due is None:
            return None
        return now + (due - self.clock.now()).total_seconds()

    def _refresh_due(self, keys: set[str], now: float) -> None:
        for key in sorted(keys):
            entry = self.machine.entries.get(key)
            tenant = self.tenants.get(key)
            if tenant is None or entry is None or entry.state is not DbState.ENABLED:
                continue
            if entry.wanted_at is not None and entry.wanted_at <= now:
                continue  # already wanted: nothing to learn
            self.machine.wake(key, self._probe(tenant, now))

    # -- messages ----------------------------------------------------------------------------

    def _read_messages(self, key: str, now: float) -> None:
        tenant = self.tenants[key]
        outage = self._read_outages.setdefault(key, Outage(f"messages of {key}"))
        try:
            pending = tenant.messages(self.clock.now())
        except (SQLAlchemyError, OSError) as exc:
            outage.failed(exc)
            return
        outage.recovered()
        for message in pending:
            before = self.machine.entries.get(key)
            was = before.state.value if before else "not registered"
            self._execute(self.machine.message(key, message.kind, now, message.id))
            ok = self.machine.ack(key, message.kind)
            outcome = self._describe(key)
            log.info("%s: %s (message %d): %s -> %s", key, message.kind.value, message.id, was,
                     outcome, extra={"action": "message"})
            try:
                tenant.acknowledge(message.id, ok, outcome, self.clock.now())
            except (SQLAlchemyError, OSError) as exc:
                log.warning("%s: could not acknowledge message %d: %s", key, message.id,
                            short(exc), extra={"action": "ack_failed"})

    def _describe(self, key: str) -> str:
        entry = self.machine.entries.get(key)
        if entry is None:
            return "not registered"
        child = self.children.get(key)
        if entry.state is DbState.STARTED and child is not None:
            return f"started (scheduler pid {child.pid})"
        if entry.state is DbState.ENABLED and entry.wants_slot(time.monotonic()):
            return f"enabled (waiting for a worker slot; {self.machine.pool.free} free)"
        if entry.state is DbState.DISABLED and entry.last_exit == Trigger.QUIT.value:
            return f"disabled: {entry.last_error or 'no Stator schema'}"
        return entry.state.value

    # -- effects on processes ----------------------------------------------------------------

    def _execute(self, outcome: Outcome) -> None:
        for key, step in outcome.steps:
            before = step.before.value if step.before else "not registered"
            log.debug("%s: %s -(%s)-> %s", key, before, step.trigger.value, step.after.value,
                      extra={"action": "transition"})
        if outcome.exhausted:
            log.warning(
                "no free worker slot (--max-workers %d: the launcher holds one, schedulers "
                "the rest): %d database(s) wait their turn", self.options.max_workers,
                outcome.exhausted, extra={"action": "slots_exhausted"},
            )
        for effect in outcome.effects:
            if effect.action is Action.START_SCHEDULER:
                self._start(effect.key, effect.wait_for)
            elif effect.action is Action.TERMINATE_SCHEDULER:
                self.schedulers.terminate(effect.key)
            elif effect.action is Action.ASK_TO_YIELD:
                self.schedulers.ask_to_yield(effect.key)

    def _start(self, key: str, wait_for: int | None) -> None:
        target = self.targets.get(key)
        try:
            if target is None:
                raise OSError("the database is no longer discovered")
            self.schedulers.start(key, target.url, wait_for)
        except OSError as exc:
            if self.machine.start_failed(key, f"cannot start a scheduler: {exc}"):
                log.error("%s: cannot start a scheduler: %s (retrying)", key, exc,
                          extra={"action": "scheduler_start_failed"})

    def _reap(self, now: float) -> None:
        for key, child, code in self.schedulers.ended():
            self._exited(key, child, code, now)

    def _exited(self, key: str, child: Child, code: int, now: float) -> None:
        tenant = self.tenants.get(key)
        if child.yield_asked or code == EXIT_IDLE:
            wanted = self._probe(tenant, now) if tenant is not None else None
            if not child.yield_asked and wanted is not None:
                # It just found nothing due; should we disagree (a row committed meanwhile,
                # or clocks that differ), look again shortly rather than restart in a loop.
                wanted = max(wanted, now + IDLE_RECHECK)
            log.info("scheduler for %s (pid %d) %s", key, child.pid,
                     "yielded its slot" if child.yield_asked else "went idle: nothing due",
                     extra={"action": "scheduler_idle"})
            self._execute(self.machine.exited(key, Trigger.IDLE, now, wanted_at=wanted))
            return
        if code == EXIT_NO_SCHEMA:
            error = _children.log_tail(child.log_path) or "no Stator schema"
            log.info("%s has no ready Stator schema (%s): disabled until a start or restart "
                     "message (`stator migrate` sends one)", key, error,
                     extra={"action": "scheduler_no_schema"})
            self._execute(self.machine.exited(key, Trigger.QUIT, now, error=error))
            return
        how = (f"killed by {signal.Signals(-code).name}" if code < 0
               else f"exit code {code}")
        tail = _children.log_tail(child.log_path)
        error = f"{how}: {tail}" if tail else how
        outcome = self.machine.exited(key, Trigger.CRASHED, now, error=error)
        entry = self.machine.entries.get(key)
        if entry is not None:
            log.warning("scheduler for %s (pid %d) died (%s); regenerating in %.1fs "
                        "(regeneration %d)", key, child.pid, error,
                        max(entry.backoff_until - now, 0.0), entry.restarts,
                        extra={"action": "scheduler_crash"})
        self._execute(outcome)

    # -- the PostgreSQL listener -------------------------------------------------------------

    def _update_listener(self) -> None:
        wanted = {
            key: self.targets[key].url for key in sorted(self.targets)
            if self.targets[key].dialect.listen_notify
            and (entry := self.machine.entries.get(key)) is not None
            and entry.state is not DbState.DISABLED
        }
        if len(wanted) > self.options.listen_max:
            wanted = dict(list(wanted.items())[: self.options.listen_max])
        if not wanted and self._listener is None:
            return
        if self._listener is None:
            self._listener = Listener(self.poke)
        waiting = {
            key for key, entry in self.machine.entries.items()
            if entry.state is DbState.ENABLED and key not in self.children
        }
        self._listener.want(wanted, waiting)

    # -- start and end -----------------------------------------------------------------------

    def _shutdown(self) -> None:
        self.schedulers.stop_all(self._stop_reason or "launcher exiting")
        if self._listener is not None:
            self._listener.close()
        for tenant in self.tenants.values():
            tenant.dispose()
        with contextlib.suppress(OSError):
            self.state_file.write(self, running=False)
        self._alarm.close()


__all__ = ["Launcher", "LauncherOptions", "Message"]
