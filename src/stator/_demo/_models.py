"""The demo's tables and their graphs: a post fans out to one inbox row per follower in
its own transition's transaction; each inbox row is delivered to a flaky remote."""

from __future__ import annotations

from sqlalchemy import ForeignKey, String, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from .._graph import State, StateGraph
from ..sqlalchemy import StatorMixin
from ._remote import current

# Retry timings are far below Stator's defaults so the demo finishes in seconds.  The
# longest wait a row can be given (max_retry_after plus jitter, ``_remote.THROTTLE_DELAY``)
# must stay under IDLE_WINDOW, or the until-idle worker would stop with rows still waiting.
RETRY_AFTER = 0.25
MAX_RETRY_AFTER = 0.8
MAX_ATTEMPTS = 4
POLL_AFTER = 0.3  # how often a fanned-out post checks whether its deliveries settled
IDLE_WINDOW = 1.0


class DemoBase(DeclarativeBase):
    """The demo's own metadata, so creating and dropping its tables touches nothing else."""


class PostStates(StateGraph):
    """A post is fanned out to its followers' inboxes, then waits for the deliveries."""

    new = State(retry_after=RETRY_AFTER, timeout=10)
    fanned_out = State(retry_after=POLL_AFTER)
    done = State()

    new.transitions_to(fanned_out)
    fanned_out.transitions_to(done)

    @classmethod
    def check_new(cls, post: Post) -> State:
        # The inbox rows go into the session Stator gave the handler, so they are committed
        # in the same transaction as the move to fanned_out: a crash can never leave a post
        # fanned out to half its followers, or fan it out twice.
        session = _session_of(post)
        followers = session.scalars(select(Follower.handle).order_by(Follower.id))
        session.add_all(Inbox(post_id=post.id, follower=handle) for handle in followers)
        return cls.fanned_out

    @classmethod
    def check_fanned_out(cls, post: Post) -> State | None:
        session = _session_of(post)
        waiting = session.scalar(
            select(func.count()).select_from(Inbox).where(
                Inbox.post_id == post.id, Inbox.state == InboxStates.pending.name
            )
        )
        return cls.done if waiting == 0 else None  # None: look again after retry_after


class InboxStates(StateGraph):
    """One delivery of one post to one follower's (unreliable) server."""

    pending = State(
        retry_after=RETRY_AFTER, max_retry_after=MAX_RETRY_AFTER, max_attempts=MAX_ATTEMPTS,
        timeout=5,
    )
    delivered = State()
    undeliverable = State()

    pending.transitions_to(delivered)
    pending.fails_to(undeliverable)

    @classmethod
    async def check_pending(cls, inbox: Inbox) -> State:
        await current().deliver(inbox.follower)
        return cls.delivered


class Follower(DemoBase):
    __tablename__ = "demo_followers"

    id: Mapped[int] = mapped_column(primary_key=True)
    handle: Mapped[str] = mapped_column(String(200))


class Post(StatorMixin, DemoBase):
    __tablename__ = "demo_posts"
    state_graph = PostStates

    id: Mapped[int] = mapped_column(primary_key=True)
    author: Mapped[str] = mapped_column(String(200))
    body: Mapped[str] = mapped_column(String(500))


class Inbox(StatorMixin, DemoBase):
    __tablename__ = "demo_inbox"
    state_graph = InboxStates

    id: Mapped[int] = mapped_column(primary_key=True)
    post_id: Mapped[int] = mapped_column(ForeignKey("demo_posts.id"), index=True)
    follower: Mapped[str] = mapped_column(String(200))


MODELS: tuple[type[Post], type[Inbox]] = (Post, Inbox)


def _session_of(row: object) -> Session:
    session = Session.object_session(row)
    if session is None:  # only if called outside a worker; Stator always attaches one
        raise RuntimeError(f"{row!r} is not in a session")
    return session
