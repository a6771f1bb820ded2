"""The launcher's per-database states and the steps between them (after TimescaleDB's
launcher), as data.

A database is in one of four states::

    ENABLED    it should have a scheduler; waiting for a worker slot (and, our extension,
               for work to be due)
    ALLOCATED  a slot is reserved for it; its scheduler is about to start
    STARTED    its scheduler process runs and holds the slot
    DISABLED   no scheduler until a message (start, restart) enables it again

``MESSAGE_STEPS`` lists every (state, message) cell, a database not yet registered
included; ``AUTOMATIC_STEPS`` the transitions taken without a message.  Each step names the
original's actions (``actions``) apart from the ones our extension adds (``extra``), so the
tests can hold the table to TimescaleDB's, cell by cell.

Only the table lives here, as data; ``_machine.Machine`` takes its steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class DbState(StrEnum):
    ENABLED = "enabled"
    ALLOCATED = "allocated"
    STARTED = "started"
    DISABLED = "disabled"

class Message(StrEnum):
    """What a sender may ask for (as in TimescaleDB): ``start`` and ``stop`` are idempotent;
    ``restart`` is not, and makes the next scheduler follow the sender's commit."""

    START = "start"
    STOP = "stop"
    RESTART = "restart"

class Trigger(StrEnum):
    """What moves a database without a message."""

    DISCOVERED = "discovered"        # launcher start or a new database: the implicit start
    SLOT_FREE = "slot free"          # ENABLED -> ALLOCATED
    SLOT_RESERVED = "slot reserved"  # ALLOCATED -> STARTED
    QUIT = "scheduler quit"          # STARTED -> DISABLED: it found no Stator schema
    IDLE = "scheduler idle"          # STARTED -> ENABLED: nothing due (extension)
    CRASHED = "scheduler crashed"    # STARTED -> ENABLED: regenerate after a backoff (ext.)
    SLICE_OVER = "slice over"        # STARTED: others wait; ask it to yield (extension)

class Action(StrEnum):
    # TimescaleDB's actions
    REGISTER = "register"
    RESERVE_SLOT = "reserve slot"
    RELEASE_SLOT = "release slot"
    START_SCHEDULER = "start scheduler"
    TERMINATE_SCHEDULER = "terminate scheduler"
    SET_WAIT_SENDER = "set wait-for-sender"  # TimescaleDB's "set vxid"
    TRY_AUTOMATIC = "try automatic transitions"
    # our extension's
    WAKE = "want a scheduler now"            # a message is a wake-up, and an operator's
    WAIT_FOR_DUE = "wait for next due time"  # the scheduler went idle: sleep until work is due
    BACK_OFF = "back off"                    # the scheduler crashed: regenerate after a delay
    ASK_TO_YIELD = "ask scheduler to yield"  # graceful stop, so a waiting database gets a turn

@dataclass(frozen=True)
class Step:
    before: DbState | None  # None: the database is not yet registered
    trigger: Message | Trigger
    after: DbState
    actions: tuple[Action, ...] = ()  # TimescaleDB's, in its order
    extra: tuple[Action, ...] = ()    # ours, applied before TRY_AUTOMATIC

    @property
    def all_actions(self) -> tuple[Action, ...]:
        """Seed and extension actions in execution order: ours go before the automatic
        transitions so that a message's wake-up counts when they are tried."""
        if Action.TRY_AUTOMATIC in self.actions:
            head = tuple(a for a in self.actions if a is not Action.TRY_AUTOMATIC)
            return (*head, *self.extra, Action.TRY_AUTOMATIC)
        return (*self.actions, *self.extra)

E, A, S, D = DbState.ENABLED, DbState.ALLOCATED, DbState.STARTED, DbState.DISABLED
START, STOP, RESTART = Message.START, Message.STOP, Message.RESTART

def _by_message(steps: list[Step]) -> dict[tuple[DbState | None, Message], Step]:
    return {(s.before, s.trigger): s for s in steps if isinstance(s.trigger, Message)}

def _by_trigger(steps: list[Step]) -> dict[tuple[DbState | None, Trigger], Step]:
    return {(s.before, s.trigger): s for s in steps if isinstance(s.trigger, Trigger)}

MESSAGE_STEPS = _by_message([
    # START: idempotent; "try automatic transitions"
    Step(None, START, E, (Action.REGISTER, Action.TRY_AUTOMATIC), (Action.WAKE,)),
    Step(E, START, E, (Action.TRY_AUTOMATIC,), (Action.WAKE,)),
    Step(A, START, A, (Action.TRY_AUTOMATIC,), (Action.WAKE,)),
    Step(S, START, S, ()),
    Step(D, START, E, (Action.TRY_AUTOMATIC,), (Action.WAKE,)),
    # STOP: idempotent, immediate.  Not-yet-registered is not in TimescaleDB's list: like
    # TimescaleDB's code, register it DISABLED so that discovery does not start it.
    Step(None, STOP, D, (Action.REGISTER,)),
    Step(E, STOP, D, ()),
    Step(A, STOP, D, (Action.RELEASE_SLOT,)),
    Step(S, STOP, D, (Action.TERMINATE_SCHEDULER, Action.RELEASE_SLOT)),
    Step(D, STOP, D, ()),
    # RESTART: not idempotent; the slot of a STARTED or ALLOCATED database is kept
    Step(None, RESTART, E,
         (Action.REGISTER, Action.SET_WAIT_SENDER, Action.TRY_AUTOMATIC), (Action.WAKE,)),
    Step(E, RESTART, E, (Action.SET_WAIT_SENDER, Action.TRY_AUTOMATIC), (Action.WAKE,)),
    Step(A, RESTART, A, (Action.SET_WAIT_SENDER, Action.TRY_AUTOMATIC), (Action.WAKE,)),
    Step(S, RESTART, A,
         (Action.TERMINATE_SCHEDULER, Action.SET_WAIT_SENDER, Action.TRY_AUTOMATIC),
         (Action.WAKE,)),
    Step(D, RESTART, E, (Action.SET_WAIT_SENDER, Action.TRY_AUTOMATIC), (Action.WAKE,)),
])

AUTOMATIC_STEPS = _by_trigger([
    # TimescaleDB's startup "start action without the message handling"; when the
    # database is first wanted is read from its next due time (extension).
    Step(None, Trigger.DISCOVERED, E, (Action.REGISTER, Action.TRY_AUTOMATIC)),
    Step(E, Trigger.SLOT_FREE, A, (Action.RESERVE_SLOT,)),
    Step(A, Trigger.SLOT_RESERVED, S, (Action.START_SCHEDULER,)),
    Step(S, Trigger.QUIT, D, (Action.RELEASE_SLOT,)),
    # extension: a scheduler that ends for another reason hands its slot back and waits
    Step(S, Trigger.IDLE, E, (), (Action.RELEASE_SLOT, Action.WAIT_FOR_DUE)),
    Step(S, Trigger.CRASHED, E, (), (Action.RELEASE_SLOT, Action.BACK_OFF)),
    Step(S, Trigger.SLICE_OVER, S, (), (Action.ASK_TO_YIELD,)),
])
