"""The launcher's per-database state machine, cell by cell (pure: no database, no process).

The first test holds the transition table to seed 003's text; the parametrized ones drive
every (state, message) cell -- a database not yet registered included -- with a worker slot
free and with none, and check the state reached, the process effects, the slot pool, the
"wait for the sender" marker and the acknowledgement.
"""

from __future__ import annotations

import random

import pytest

from stator._launcher._machine import Backoff, Effect, Entry, Machine, SlotPool
from stator._launcher._steps import (
    AUTOMATIC_STEPS,
    MESSAGE_STEPS,
    Action,
    DbState,
    Message,
    Trigger,
)

E, A, S, D = DbState.ENABLED, DbState.ALLOCATED, DbState.STARTED, DbState.DISABLED
START, STOP, RESTART = Message.START, Message.STOP, Message.RESTART
REG, RES, REL = Action.REGISTER, Action.RESERVE_SLOT, Action.RELEASE_SLOT
RUN, KILL = Action.START_SCHEDULER, Action.TERMINATE_SCHEDULER
VXID, AUTO = Action.SET_WAIT_SENDER, Action.TRY_AUTOMATIC
NOW = 1000.0
KEY = "db"
MSG_ID = 42

# Seed 003, "a detailed description of the transitions", transcribed.
SEED_MESSAGES = {
    (E, STOP): (D, ()),                          # No action
    (A, STOP): (D, (REL,)),                      # Release slot.
    (S, STOP): (D, (KILL, REL)),                 # Terminate scheduler & release slot
    (D, STOP): (D, ()),                          # No Action
    (None, START): (E, (REG, AUTO)),             # Register, set to ENABLED, ENABLED action
    (E, START): (E, (AUTO,)),                    # Try automatic transitions
    (A, START): (A, (AUTO,)),                    # Try automatic transitions
    (S, START): (S, ()),                         # No action
    (D, START): (E, (AUTO,)),                    # Try automatic transitions
    (None, RESTART): (E, (REG, VXID, AUTO)),     # Register, ENABLED, take ENABLED actions
    (E, RESTART): (E, (VXID, AUTO)),             # Set vxid, try automatic transitions
    (A, RESTART): (A, (VXID, AUTO)),             # Set vxid, try automatic transitions
    (S, RESTART): (A, (KILL, VXID, AUTO)),       # Terminate, do /not/ release slot, set vxid
    (D, RESTART): (E, (VXID, AUTO)),             # Set vxid, try automatic transitions
    # Not in the seed's list; TimescaleDB's code registers the database and disables it.
    (None, STOP): (D, (REG,)),
}
SEED_AUTOMATIC = {
    (E, Trigger.SLOT_FREE): (A, (RES,)),         # Reserved slot for worker
    (A, Trigger.SLOT_RESERVED): (S, (RUN,)),     # Scheduler started
    (S, Trigger.QUIT): (D, (REL,)),              # Iff scheduler has stopped. Release slot.
}
STATES = [None, E, A, S, D]


def test_the_message_table_is_the_seeds_cell_by_cell() -> None:
    assert set(MESSAGE_STEPS) == {(s, m) for s in STATES for m in Message}
    for cell, (after, actions) in SEED_MESSAGES.items():
        step = MESSAGE_STEPS[cell]
        assert (step.after, step.actions) == (after, actions), cell
    # Our extension only ever adds a wake-up, and never to the idempotent no-op cells.
    extras = {cell: step.extra for cell, step in MESSAGE_STEPS.items() if step.extra}
    assert set(extras.values()) == {(Action.WAKE,)}
    assert (S, START) not in extras and all(m is not STOP for _s, m in extras)


def test_the_automatic_table_keeps_the_seeds_and_marks_the_extension() -> None:
    for cell, (after, actions) in SEED_AUTOMATIC.items():
        step = AUTOMATIC_STEPS[cell]
        assert (step.after, step.actions, step.extra) == (after, actions, ()), cell
    ours = {cell: step for cell, step in AUTOMATIC_STEPS.items()
            if cell not in SEED_AUTOMATIC and step.trigger is not Trigger.DISCOVERED}
    assert {c[1] for c in ours} == {Trigger.IDLE, Trigger.CRASHED, Trigger.SLICE_OVER}
    for step in ours.values():
        assert step.actions == () and step.before is S  # extension actions only
    assert AUTOMATIC_STEPS[(None, Trigger.DISCOVERED)].actions == (REG, AUTO)


# -- driving every cell ------------------------------------------------------------------------


def machine_with(state: DbState | None, *, slot_free: bool, wait_for: int | None = None
                 ) -> Machine:
    """A machine of 3 slots (the launcher holds one) with ``KEY`` in ``state``; without a free
    slot, other databases hold the rest."""
    machine = Machine(3)
    if state is not None:
        entry = Entry(KEY, state=state, wait_for=wait_for, enabled_at=NOW - 5)
        if state in (A, S):
            assert machine.pool.reserve()
            entry.holds_slot = True
        if state is S:
            entry.running_since = NOW - 5
        machine.entries[KEY] = entry
    while not slot_free and machine.pool.free:
        other = f"other{machine.pool.used}"
        machine.entries[other] = Entry(other, state=S, holds_slot=True, running_since=NOW)
        assert machine.pool.reserve()
    return machine


# (state, message) -> with a slot free: (final state, effects, slots used by KEY, ack)
WITH_SLOT = {
    (None, START): (S, [RUN], 1, True),
    (E, START): (S, [RUN], 1, True),
    (A, START): (S, [RUN], 1, True),
    (S, START): (S, [], 1, True),
    (D, START): (S, [RUN], 1, True),
    (None, STOP): (D, [], 0, True),
    (E, STOP): (D, [], 0, True),
    (A, STOP): (D, [], 0, True),
    (S, STOP): (D, [KILL], 0, True),
    (D, STOP): (D, [], 0, True),
    (None, RESTART): (S, [RUN], 1, True),
    (E, RESTART): (S, [RUN], 1, True),
    (A, RESTART): (S, [RUN], 1, True),
    (S, RESTART): (S, [KILL, RUN], 1, True),
    (D, RESTART): (S, [RUN], 1, True),
}
# ... and with every other slot taken: only a database that holds its own slot runs.
WITHOUT_SLOT = {
    (None, START): (E, [], 0, False),
    (E, START): (E, [], 0, False),
    (A, START): (S, [RUN], 1, True),
    (S, START): (S, [], 1, True),
    (D, START): (E, [], 0, False),
    (None, STOP): (D, [], 0, True),
    (E, STOP): (D, [], 0, True),
    (A, STOP): (D, [], 0, True),
    (S, STOP): (D, [KILL], 0, True),
    (D, STOP): (D, [], 0, True),
    (None, RESTART): (E, [], 0, False),
    (E, RESTART): (E, [], 0, False),
    (A, RESTART): (S, [RUN], 1, True),
    (S, RESTART): (S, [KILL, RUN], 1, True),  # the seed's point: the slot is never given up
    (D, RESTART): (E, [], 0, False),
}


@pytest.mark.parametrize("slot_free", [True, False], ids=["slot-free", "no-slot"])
@pytest.mark.parametrize("cell", list(WITH_SLOT), ids=lambda c: f"{c[0] or 'unregistered'}-{c[1]}")
def test_every_cell(cell: tuple[DbState | None, Message], slot_free: bool) -> None:
    state, message = cell
    expected_state, actions, slots, ack = (WITH_SLOT if slot_free else WITHOUT_SLOT)[cell]
    machine = machine_with(state, slot_free=slot_free)
    others_used = machine.pool.used - (1 if state in (A, S) else 0)

    outcome = machine.message(KEY, message, NOW, MSG_ID)

    entry = machine.entries[KEY]
    assert entry.state is expected_state
    assert [e.action for e in outcome.effects] == actions
    assert machine.pool.used == others_used + slots
    assert entry.holds_slot is bool(slots)
    assert machine.ack(KEY, message) is ack
    assert outcome.steps[0][1] is MESSAGE_STEPS[(state, message)]
    if message is RESTART:
        # the marker travels with the scheduler start, or waits on the entry for it
        started = [e for e in outcome.effects if e.action is RUN]
        if started:
            assert started[0].wait_for == MSG_ID and entry.wait_for is None
        else:
            assert entry.wait_for == MSG_ID
    for effect in outcome.effects:
        if effect.action is RUN and message is not RESTART:
            assert effect.wait_for is None


def test_restart_keeps_the_slot_throughout_even_with_others_waiting() -> None:
    machine = machine_with(S, slot_free=False)
    machine.entries["waiting"] = Entry("waiting", state=E, wanted_at=NOW - 100, enabled_at=0)
    used = machine.pool.used
    outcome = machine.message(KEY, RESTART, NOW, MSG_ID)
    assert [(s.before, s.after) for _k, s in outcome.steps] == [(S, A), (A, S)]
    assert machine.pool.used == used
    assert machine.entries["waiting"].state is E
    assert outcome.effects == [Effect(KILL, KEY), Effect(RUN, KEY, MSG_ID)]


def test_start_neither_sets_nor_clears_the_wait_marker() -> None:
    machine = machine_with(E, slot_free=False, wait_for=7)
    machine.message(KEY, START, NOW, MSG_ID)
    assert machine.entries[KEY].wait_for == 7
    # once a slot frees, the scheduler starts following message 7, and the marker is spent
    machine.entries["other1"].state = D
    machine.entries["other1"].holds_slot = False
    machine.pool.release()
    outcome = machine.automatic(NOW + 1)
    assert outcome.effects == [Effect(RUN, KEY, 7)]
    assert machine.entries[KEY].wait_for is None


def test_start_and_stop_are_idempotent_restart_is_not() -> None:
    machine = Machine(3)
    first = machine.message(KEY, START, NOW)
    again = machine.message(KEY, START, NOW)
    assert [e.action for e in first.effects] == [RUN] and again.effects == []
    assert machine.message(KEY, RESTART, NOW, 1).effects == [Effect(KILL, KEY),
                                                             Effect(RUN, KEY, 1)]
    assert machine.message(KEY, RESTART, NOW, 2).effects == [Effect(KILL, KEY),
                                                             Effect(RUN, KEY, 2)]
    assert [e.action for e in machine.message(KEY, STOP, NOW).effects] == [KILL]
    assert machine.message(KEY, STOP, NOW).effects == []
    assert machine.pool.used == 1  # only the launcher's own slot


# -- automatic transitions ---------------------------------------------------------------------


def test_the_launcher_holds_a_slot_and_needs_one_for_a_scheduler() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        Machine(1)
    machine = Machine(2)
    assert (machine.pool.used, machine.pool.free) == (1, 1)
    machine.discovered("a", NOW, wanted_at=NOW)
    machine.discovered("b", NOW, wanted_at=NOW)
    assert machine.entries["a"].state is S and machine.entries["b"].state is E


def test_discovery_starts_only_databases_with_work_due() -> None:
    machine = Machine(4)
    now_due = machine.discovered("due", NOW, wanted_at=NOW - 3)
    later = machine.discovered("later", NOW, wanted_at=NOW + 30)
    idle = machine.discovered("idle", NOW, wanted_at=None)
    assert [e.action for e in now_due.effects] == [RUN]
    assert later.effects == idle.effects == []
    assert machine.next_deadline(NOW) == NOW + 30
    assert machine.automatic(NOW + 30).effects == [Effect(RUN, "later")]
    machine.wake("idle", NOW + 31)  # new work seen in the database
    assert machine.automatic(NOW + 31).effects == [Effect(RUN, "idle")]
    # a database registered by a message is not registered again by discovery
    assert machine.discovered("due", NOW, wanted_at=NOW).steps == []


def test_a_stop_before_discovery_keeps_the_database_stopped() -> None:
    machine = Machine(3)
    machine.message(KEY, STOP, NOW)
    assert machine.discovered(KEY, NOW, wanted_at=NOW).steps == []
    assert machine.entries[KEY].state is D
    assert machine.automatic(NOW).effects == []


def test_scheduler_without_schema_disables_until_a_message() -> None:
    machine = Machine(3)
    machine.discovered(KEY, NOW, wanted_at=NOW)
    outcome = machine.exited(KEY, Trigger.QUIT, NOW + 1, error="no Stator tables")
    entry = machine.entries[KEY]
    assert (entry.state, entry.holds_slot, machine.pool.used) == (D, False, 1)
    assert entry.last_error == "no Stator tables" and entry.restarts == 0
    assert outcome.effects == [] and machine.automatic(NOW + 100).effects == []
    machine.wake(KEY, NOW)  # new work does not re-enable a disabled database
    assert machine.automatic(NOW + 100).effects == []
    assert [e.action for e in machine.message(KEY, RESTART, NOW + 2, 9).effects] == [RUN]


def test_idle_scheduler_hands_its_slot_back_and_waits_for_the_next_due_time() -> None:
    machine = Machine(2)
    machine.discovered("a", NOW, wanted_at=NOW)
    machine.discovered("b", NOW, wanted_at=NOW)
    outcome = machine.exited("a", Trigger.IDLE, NOW + 2, wanted_at=NOW + 60)
    assert machine.entries["a"].state is E and machine.entries["a"].wanted_at == NOW + 60
    assert outcome.effects == [] and machine.pool.used == 1
    assert machine.automatic(NOW + 2).effects == [Effect(RUN, "b")]
    assert machine.entries["b"].total_wait == pytest.approx(2.0)


def test_crashed_scheduler_is_regenerated_after_a_growing_backoff() -> None:
    machine = Machine(3, backoff=Backoff(floor=5, cap=30))
    machine.discovered(KEY, NOW, wanted_at=NOW)
    delays = []
    now = NOW
    for _ in range(5):
        machine.exited(KEY, Trigger.CRASHED, now, error="exit code 1: boom")
        entry = machine.entries[KEY]
        assert entry.state is E and not entry.holds_slot
        assert machine.automatic(entry.backoff_until - 0.01).effects == []
        delays.append(entry.backoff_until - now)
        now = entry.backoff_until
        assert machine.automatic(now).effects == [Effect(RUN, KEY)]
    assert delays == [5, 10, 20, 30, 30]
    assert machine.entries[KEY].restarts == 5
    assert machine.entries[KEY].last_error == "exit code 1: boom"
    # an idle exit ends the streak; an operator's start skips the brake
    machine.exited(KEY, Trigger.IDLE, now + 1, wanted_at=None)
    machine.wake(KEY, now + 2)
    machine.automatic(now + 2)
    machine.exited(KEY, Trigger.CRASHED, now + 3)
    assert machine.entries[KEY].backoff_until == now + 3 + 5
    assert [e.action for e in machine.message(KEY, START, now + 4).effects] == [RUN]


def test_exits_of_schedulers_no_longer_started_are_ignored() -> None:
    machine = Machine(3)
    machine.discovered(KEY, NOW, wanted_at=NOW)
    machine.message(KEY, STOP, NOW)
    assert machine.exited(KEY, Trigger.CRASHED, NOW).steps == []
    assert machine.entries[KEY].restarts == 0
    assert machine.exited("unknown", Trigger.IDLE, NOW).steps == []


def test_a_failed_start_keeps_the_slot_and_is_retried() -> None:
    machine = Machine(2)
    machine.discovered(KEY, NOW, wanted_at=NOW)
    assert machine.start_failed(KEY, "fork failed") is True
    assert machine.start_failed(KEY, "fork failed") is False  # logged once per episode
    entry = machine.entries[KEY]
    assert (entry.state, entry.holds_slot, entry.last_error) == (A, True, "fork failed")
    assert machine.automatic(NOW + 1).effects == [Effect(RUN, KEY)]


def test_dropping_a_database_stops_its_scheduler_and_forgets_it() -> None:
    machine = Machine(3)
    machine.discovered(KEY, NOW, wanted_at=NOW)
    outcome = machine.drop(KEY, NOW)
    assert outcome.effects == [Effect(KILL, KEY)]
    assert KEY not in machine.entries and machine.pool.used == 1
    assert machine.drop(KEY, NOW).steps == []


# -- sharing the slots -------------------------------------------------------------------------


def test_slots_go_to_the_longest_waiting_and_exhaustion_is_one_episode() -> None:
    machine = Machine(3)  # two scheduler slots
    for i, key in enumerate("abcde"):
        machine.discovered(key, NOW + i, wanted_at=NOW + i)
    assert {k for k, e in machine.entries.items() if e.state is S} == {"a", "b"}
    first = machine.automatic(NOW + 10)
    assert first.exhausted == 3 and machine.episodes == 1
    assert machine.automatic(NOW + 11).exhausted == 0 and machine.episodes == 1
    machine.exited("b", Trigger.IDLE, NOW + 12, wanted_at=NOW + 12)
    assert machine.automatic(NOW + 12).effects == [Effect(RUN, "c")]
    machine.exited("a", Trigger.IDLE, NOW + 13, wanted_at=NOW + 12)
    assert machine.automatic(NOW + 13).effects == [Effect(RUN, "d")]  # b waited since 12
    for key in "cd":
        machine.exited(key, Trigger.IDLE, NOW + 14, wanted_at=None)
    machine.automatic(NOW + 14)  # e and b run; a waits
    for key in "eb":
        machine.exited(key, Trigger.IDLE, NOW + 15, wanted_at=None)
    machine.automatic(NOW + 15)
    machine.exited("a", Trigger.IDLE, NOW + 16, wanted_at=None)
    assert machine.automatic(NOW + 16).exhausted == 0 and not machine.waiting(NOW + 16)
    machine.wake("a", NOW + 17)
    for key in "bcd":
        machine.wake(key, NOW + 17)
    assert machine.automatic(NOW + 17).exhausted == 2 and machine.episodes == 2


def test_a_scheduler_past_its_slice_yields_to_a_waiting_database() -> None:
    machine = Machine(3, slice_seconds=60)
    machine.discovered("busy1", NOW, wanted_at=NOW)
    machine.discovered("busy2", NOW + 10, wanted_at=NOW + 10)
    machine.discovered("late", NOW + 20, wanted_at=NOW + 20)
    assert machine.next_deadline(NOW + 20) == NOW + 60
    assert machine.automatic(NOW + 59).effects == []
    outcome = machine.automatic(NOW + 75)
    assert outcome.effects == [Effect(Action.ASK_TO_YIELD, "busy1")]  # one waiter, one yield
    assert machine.automatic(NOW + 80).effects == []  # not asked twice
    machine.exited("busy1", Trigger.IDLE, NOW + 81, wanted_at=NOW + 81)
    # late gets the slot; busy1 now waits its turn, so busy2 (past its slice) is asked next
    assert machine.automatic(NOW + 81).effects == [
        Effect(RUN, "late"), Effect(Action.ASK_TO_YIELD, "busy2"),
    ]
    assert machine.entries["busy1"].state is E


def simulate(tenants: int, slots: int, seconds: int, period: float, run: float,
             busy: frozenset[str] = frozenset()) -> Machine:
    """Discrete simulation: tenants get work every ``period`` seconds (random phase); a
    scheduler works ``run`` seconds then exits idle -- except ``busy`` tenants, which only
    stop when asked to yield."""
    rng = random.Random(5)
    machine = Machine(slots + 1, slice_seconds=30)
    phase = {f"t{i:03}": rng.uniform(0, period) for i in range(tenants)}
    for key, at in phase.items():
        machine.discovered(key, 0.0, wanted_at=0.0 if key in busy else at)
    yielding: set[str] = set()
    tick = 0.5
    now = 0.0
    while now < seconds:
        now += tick
        for key, entry in machine.entries.items():
            if entry.state is not S or entry.running_since is None:
                continue
            done = key in yielding or (key not in busy and now - entry.running_since >= run)
            if done:
                yielding.discard(key)
                due = now if key in busy else now + period
                machine.exited(key, Trigger.IDLE, now, wanted_at=due)
        outcome = machine.automatic(now)
        yielding |= {e.key for e in outcome.effects if e.action is Action.ASK_TO_YIELD}
    return machine


def test_two_hundred_mostly_idle_tenants_share_three_slots_and_none_starves() -> None:
    machine = simulate(tenants=200, slots=3, seconds=2000, period=200, run=1.0)
    starts = [e.starts for e in machine.entries.values()]
    waits = [e.max_wait for e in machine.entries.values()]
    assert min(starts) >= 9  # every tenant served each period (2000 s / 200 s, less a phase)
    # Never more than one full round of the others ahead of anyone: 200 tenants x 1 s / 3.
    assert max(waits) <= 200 * 1.0 / 3 + 1


def test_busy_tenants_take_turns_through_slices() -> None:
    busy = frozenset(f"t{i:03}" for i in range(5))
    machine = simulate(tenants=5, slots=2, seconds=600, period=10, run=1.0, busy=busy)
    starts = [machine.entries[k].starts for k in sorted(busy)]
    assert min(starts) >= 3 and max(starts) - min(starts) <= 2


def test_backoff_and_pool_edges() -> None:
    assert Backoff(floor=5, cap=1).delay(3) == 5  # the floor wins over a smaller cap
    assert Backoff(floor=0.5, cap=10).delay(1) == 0.5
    pool = SlotPool(2)
    assert pool.reserve() and pool.reserve() and not pool.reserve()
    pool.release()
    pool.release()
    with pytest.raises(RuntimeError):
        pool.release()


def test_a_clean_run_after_a_crash_clears_the_last_error() -> None:
    """Item 10: launcher-status must not show an error the database has recovered from."""
    machine = Machine(3, backoff=Backoff(floor=5, cap=30))
    machine.discovered(KEY, NOW, wanted_at=NOW)
    machine.exited(KEY, Trigger.CRASHED, NOW, error="exit code 1: boom")
    assert machine.entries[KEY].last_error == "exit code 1: boom"
    now = machine.entries[KEY].backoff_until
    assert machine.automatic(now).effects == [Effect(RUN, KEY)]
    machine.exited(KEY, Trigger.IDLE, now + 1, wanted_at=None)
    assert machine.entries[KEY].last_error is None
