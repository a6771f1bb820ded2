"""The issue's contract models (without the task part), and a few for behaviour tests."""

import os
import threading
import time
from pathlib import Path
from typing import Any

from django.db import models

from stator import State, StateGraph, TryAgainLater
from stator.django.models import StatorModel


class OrderStates(StateGraph):
    new = State(retry_after=30)
    charged = State(externally_progressed=True)
    shipped = State()
    new.transitions_to(charged)
    charged.transitions_to(shipped)

    @classmethod
    def check_new(cls, order: Any) -> Any:  # a Django instance, or (tests) a SQLAlchemy one
        if not order.paid:
            return None
        if order.note == "race":  # the application moves the row while its handler runs
            order.move_elsewhere(cls.charged)
        order.add_receipt()  # commits with the transition, or not at all
        if order.note == "fail-after-write":
            raise RuntimeError("boom after writing")
        return cls.charged


class Order(StatorModel):
    state_graph = OrderStates
    paid = models.BooleanField(default=False)
    note = models.CharField(max_length=100, blank=True, default="")
    state_history = models.JSONField(null=True)

    def add_receipt(self) -> None:
        Receipt.objects.using(self._state.db).create(order=self)

    def move_elsewhere(self, to: State) -> None:
        """Another connection (another thread) moves this row first."""
        import threading

        from django.db import connections

        def move() -> None:
            try:
                Order.objects.using(self._state.db).get(pk=self.pk).transition_perform(to)
            finally:
                connections.close_all()

        mover = threading.Thread(target=move)
        mover.start()
        mover.join()


class PaidOrder(Order):
    """A proxy of a StatorModel (a second admin over the same table): not run on its own."""

    class Meta:
        proxy = True


class Receipt(models.Model):
    order = models.OneToOneField(Order, on_delete=models.CASCADE)


class JobStates(StateGraph):
    """Failures, backoff, give-up, "not yet" and a later start."""

    waiting = State(retry_after=60, max_attempts=3, backoff=2.0)
    done = State()
    gave_up = State()
    waiting.transitions_to(done)
    waiting.fails_to(gave_up)

    @classmethod
    def check_waiting(cls, job: Any) -> Any:
        if job.kind == "fail":
            raise ValueError(f"job {job.pk} failed")
        if job.kind == "later":
            raise TryAgainLater(delay=600)
        if job.kind == "slow":  # for the signal tests: a handler still running at SIGINT
            Path(os.environ["DJTEST_SLOW_MARK"]).touch()
            time.sleep(20)
        if job.kind == "bad":
            return "gave_up_nowhere"
        return cls.done


class Job(StatorModel):
    state_graph = JobStates
    kind = models.CharField(max_length=20, default="ok")


class NoteStates(StateGraph):
    """A handler that writes nothing but asks for work after the commit."""

    draft = State()
    sent = State()
    draft.transitions_to(sent)

    @classmethod
    def check_draft(cls, note: Any) -> Any:
        from django.db import transaction

        transaction.on_commit(lambda: SENT.append(note.pk), using=note._state.db)
        return cls.sent


SENT: list[Any] = []


class Note(StatorModel):
    state_graph = NoteStates


class ParcelStates(StateGraph):
    """Timing and claiming: a later first attempt, an async handler leaving a result for the
    engine's write (``stator_extra``), claim priority, a timed edge and a deletion."""

    packed = State(start_after=60)
    sent = State(externally_progressed=True)
    delivered = State(delete_after=100)
    lost = State()
    packed.transitions_to(sent)
    sent.transitions_to(delivered)
    sent.times_out_to(lost, seconds=300)

    @classmethod
    async def check_packed(cls, parcel: Any) -> Any:
        PACKED.append(parcel.pk if hasattr(parcel, "pk") else parcel.id)
        parcel.stator_extra = {"label": f"label {PACKED[-1]}"}
        return cls.sent


PACKED: list[Any] = []


def write_labels(table: str, store: Any, conn: Any, writes: Any) -> None:
    """``stator_write_extra`` of both parcel models: the labels, in the fenced write's
    transaction, for the rows whose fence held."""
    from sqlalchemy import text

    quoted = store.engine.dialect.identifier_preparer.quote(table)
    for write in writes:
        conn.execute(text(f"UPDATE {quoted} SET label = :label WHERE id = :id"),
                     {"label": write.extra["label"], "id": write.pk})


class Parcel(StatorModel):
    state_graph = ParcelStates
    priority = models.IntegerField(default=0)
    label = models.CharField(max_length=50, null=True)

    stator_claim_priority = "priority"

    @classmethod
    def stator_write_extra(cls, store: Any, conn: Any, writes: Any) -> None:
        write_labels(cls._meta.db_table, store, conn, writes)


ERRAND_RELEASE = threading.Event()  # set by the tests to let a hanging errand end


class ErrandStates(StateGraph):
    """Handlers that misbehave in the in-request runner: they exit, interrupt or hang."""

    pending = State(timeout=0.5, retry_after=60)
    slow = State(timeout=30, retry_after=60)  # for the request's budget: longer than it
    done = State()
    pending.transitions_to(done)
    pending.transitions_to(slow)
    slow.transitions_to(done)

    @classmethod
    def check_slow(cls, errand: Any) -> Any:
        return cls.check_pending(errand)

    @classmethod
    def check_pending(cls, errand: Any) -> Any:
        if errand.kind == "exit":
            raise SystemExit(3)
        if errand.kind == "interrupt":
            raise KeyboardInterrupt
        if errand.kind == "hang":
            ERRAND_RELEASE.wait(60)
        return cls.done


class Errand(StatorModel):
    state_graph = ErrandStates
    kind = models.CharField(max_length=20, default="ok")
