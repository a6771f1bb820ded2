"""Graphs whose drawings the geometry and browser tests check besides the ones the tests
define: the README's orders graph (a timed edge beside a plain one between the same states),
the django.tasks backend's graph (a plain and a give-up edge side by side, twice), and graphs
shaped like a federated server's (posts fanned out to followers' inboxes, follows that are
requested, accepted and undone, identities refreshed in a cycle)."""

from __future__ import annotations

from stator import State, StateGraph
from stator._demo import InboxStates as DemoInboxStates
from stator._demo import PostStates as DemoPostStates
from stator.django._task_model import TaskStates

DAY = 24 * 3600


class OrderStates(StateGraph):
    """The README's graph."""

    new = State(retry_after=30)
    charged = State(retry_after=60, timeout=10)
    packed = State(externally_progressed=True)
    shipped = State()
    cancelled = State(delete_after=DAY)

    new.transitions_to(charged)
    new.transitions_to(cancelled)
    new.times_out_to(cancelled, seconds=7 * DAY)
    charged.transitions_to(packed)
    packed.transitions_to(shipped)

    @classmethod
    def check_new(cls, row: object) -> None:
        return None

    @classmethod
    def check_charged(cls, row: object) -> None:
        return None


class PostStates(StateGraph):
    """A post: fanned out when new, again when edited or deleted."""

    new = State(retry_after=300)
    fanned_out = State(externally_progressed=True)
    edited = State(retry_after=300)
    edited_fanned_out = State(externally_progressed=True)
    deleted = State(retry_after=300)
    deleted_fanned_out = State(delete_after=DAY)

    new.transitions_to(fanned_out)
    fanned_out.transitions_to(edited)
    fanned_out.transitions_to(deleted)
    edited.transitions_to(edited_fanned_out)
    edited_fanned_out.transitions_to(edited)
    edited_fanned_out.transitions_to(deleted)
    deleted.transitions_to(deleted_fanned_out)

    @classmethod
    def handle_new(cls, row: object) -> None:
        return None

    @classmethod
    def handle_edited(cls, row: object) -> None:
        return None

    @classmethod
    def handle_deleted(cls, row: object) -> None:
        return None


class FanOutStates(StateGraph):
    """One delivery of a post to one inbox, given up after a while."""

    new = State(retry_after=300)
    sent = State(delete_after=2 * DAY)
    failed = State(delete_after=2 * DAY)
    skipped = State(delete_after=2 * DAY)

    new.transitions_to(sent)
    new.transitions_to(skipped)
    new.times_out_to(failed, seconds=2 * DAY)

    @classmethod
    def handle_new(cls, row: object) -> None:
        return None


class FollowStates(StateGraph):
    """A follow: requested, accepted or rejected, undone later."""

    unrequested = State(retry_after=600, max_attempts=10)
    pending_approval = State(externally_progressed=True)
    accepted = State(externally_progressed=True)
    rejected = State(retry_after=600)
    undone = State(retry_after=600)
    undone_remotely = State(delete_after=DAY)
    failed = State()

    unrequested.transitions_to(pending_approval)
    unrequested.transitions_to(accepted)
    unrequested.times_out_to(failed, seconds=DAY)
    unrequested.fails_to(failed)
    pending_approval.transitions_to(accepted)
    pending_approval.transitions_to(rejected)
    pending_approval.transitions_to(undone)
    accepted.transitions_to(rejected)
    accepted.transitions_to(undone)
    rejected.transitions_to(undone_remotely)
    undone.transitions_to(undone_remotely)

    @classmethod
    def handle_unrequested(cls, row: object) -> None:
        return None

    @classmethod
    def handle_rejected(cls, row: object) -> None:
        return None

    @classmethod
    def handle_undone(cls, row: object) -> None:
        return None


class IdentityStates(StateGraph):
    """A remote identity, fetched again when it goes stale, until deleted."""

    outdated = State(retry_after=3600, max_attempts=5, force_initial=True)
    updated = State(retry_after=DAY, attempt_immediately=False)
    deleted = State(retry_after=3600)
    deleted_fanned_out = State(delete_after=7 * DAY)
    moved = State()

    outdated.transitions_to(updated)
    outdated.fails_to(deleted)
    updated.transitions_to(outdated)
    updated.transitions_to(moved)
    updated.times_out_to(outdated, seconds=7 * DAY)
    deleted.transitions_to(deleted_fanned_out)

    @classmethod
    def handle_outdated(cls, row: object) -> None:
        return None

    @classmethod
    def handle_updated(cls, row: object) -> None:
        return None

    @classmethod
    def handle_deleted(cls, row: object) -> None:
        return None


class InboxMessageStates(StateGraph):
    """An incoming message: processed, or given up on after failures or a deadline."""

    received = State(retry_after=30, max_attempts=4)
    processed = State(delete_after=DAY)
    errored = State(delete_after=7 * DAY)

    received.transitions_to(processed)
    received.fails_to(errored)
    received.times_out_to(errored, seconds=DAY)

    @classmethod
    def handle_received(cls, row: object) -> None:
        return None


ZOO: list[type[StateGraph]] = [
    OrderStates, TaskStates, DemoPostStates, DemoInboxStates, PostStates, FanOutStates,
    FollowStates, IdentityStates, InboxMessageStates,
]
