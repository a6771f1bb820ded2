"""The engine on models declared as applications declare them: ``djtest.orders`` (a Django
app) and its SQLAlchemy twins, run by the same graphs, on every integration and database
(tests/engine/conftest.py).  The graphs' handlers write through the application's ORM
(receipts, labels), race the application, fail, and wait.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from app_side import add, alias_of, create_table, load, move, run_sql
from django.db.models import Model as DjangoModel
from djtest.orders.models import (
    PACKED,
    Job,
    JobStates,
    Order,
    OrderStates,
    Parcel,
    ParcelStates,
    Receipt,
    write_labels,
)
from sqlalchemy import JSON, String, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from stator import CycleReport, ManualClock, State, Stator, TransitionConflict, TransitionError
from stator._policy import Moved, after_run
from stator._store import ErrorRecord
from stator.sqlalchemy import StatorMixin

# -- the SQLAlchemy twins of djtest.orders ---------------------------------------------------


class Base(DeclarativeBase):
    pass


class SAOrder(StatorMixin, Base):
    __tablename__ = "sa_orders"
    state_graph = OrderStates
    id: Mapped[int] = mapped_column(primary_key=True)
    paid: Mapped[bool] = mapped_column(default=False)
    note: Mapped[str] = mapped_column(String(100), default="")
    state_history: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)

    def add_receipt(self) -> None:
        session = Session.object_session(self)
        assert session is not None
        session.add(SAReceipt(order_id=self.id))

    def move_elsewhere(self, to: State) -> None:
        session = Session.object_session(self)
        assert session is not None
        engine = session.get_bind()

        def move() -> None:
            with Session(engine) as other:
                row = other.get(SAOrder, self.id)
                assert row is not None
                row.transition_perform(to)
                other.commit()

        mover = threading.Thread(target=move)
        mover.start()
        mover.join()


class SAReceipt(Base):
    __tablename__ = "sa_receipts"
    id: Mapped[int] = mapped_column(primary_key=True)
    order_id: Mapped[int] = mapped_column()


class SAJob(StatorMixin, Base):
    __tablename__ = "sa_jobs"
    state_graph = JobStates
    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(20), default="ok")


class SAParcel(StatorMixin, Base):
    __tablename__ = "sa_parcels"
    state_graph = ParcelStates
    id: Mapped[int] = mapped_column(primary_key=True)
    priority: Mapped[int] = mapped_column(default=0)
    label: Mapped[str | None] = mapped_column(String(50), nullable=True)

    stator_claim_priority = "priority"

    @classmethod
    def stator_write_extra(cls, store: Any, conn: Any, writes: Any) -> None:
        write_labels(cls.__tablename__, store, conn, writes)


# -- the shop on either integration ---------------------------------------------------------


@pytest.fixture
def shop(integration: str, backend: str, clock: ManualClock, make_stator: Any) -> SimpleNamespace:
    """The integration's ``orders``, ``jobs``, ``parcels`` and ``receipts`` models, and
    ``stator`` running the first three (receipts are the orders' handler's writes)."""
    if integration.startswith("django"):
        models = SimpleNamespace(orders=Order, jobs=Job, parcels=Parcel, receipts=Receipt)
    else:
        models = SimpleNamespace(orders=SAOrder, jobs=SAJob, parcels=SAParcel,
                                 receipts=SAReceipt)
    models.stator = make_stator(backend, [models.orders, models.jobs, models.parcels], clock)
    create_table(models.stator, models.receipts)
    return models


def run(shop: SimpleNamespace) -> CycleReport:
    return shop.stator.run_once(raise_errors=False)


def table(model: Any) -> str:
    if isinstance(model, type) and issubclass(model, DjangoModel):
        return str(model._meta.db_table)
    return str(model.__tablename__)


def receipts(shop: SimpleNamespace, pk: Any) -> int:
    if alias := alias_of(shop.stator):
        return int(Receipt.objects.using(alias).filter(order_id=pk).count())
    with Session(shop.stator.engine) as session:
        query = select(func.count()).select_from(SAReceipt).where(SAReceipt.order_id == pk)
        return int(session.scalar(query) or 0)


def errors_of(shop: SimpleNamespace, pk: Any) -> list[ErrorRecord]:
    return [e for e in shop.stator.store.recent_errors(100) if e.row_pk == str(pk)]


def tracked_of(stator: Stator, model: type) -> Any:
    return next(t for t in stator.store.tracked if t.model is model)


def history(obj: Any) -> list[str]:
    return [entry[0] for entry in (obj.state_history or [])]


# -- the suite -------------------------------------------------------------------------------


def test_paid_orders_move_and_unpaid_retry_later(shop: SimpleNamespace, clock: ManualClock) -> None:
    add(shop.stator, shop.orders(id=1, paid=True), shop.orders(id=2, paid=False))
    report = run(shop)
    assert (report.claimed, report.transitions, report.errors) == (2, 1, 0)
    row = load(shop.stator, shop.orders, 1)
    assert (row.state, history(row), receipts(shop, 1)) == ("charged", ["charged"], 1)
    row = load(shop.stator, shop.orders, 2)
    assert (row.state, row.state_attempts, receipts(shop, 2)) == ("new", 0, 0)
    assert run(shop).claimed == 0  # "not yet": due again after retry_after (30 s)
    clock.advance(31)
    assert run(shop).claimed == 1


def test_handler_writes_commit_only_with_its_transition(shop: SimpleNamespace) -> None:
    add(shop.stator, shop.orders(id=1, paid=True, note="fail-after-write"))
    report = run(shop)
    assert report.errors == 1
    row = load(shop.stator, shop.orders, 1)
    assert (row.state, row.state_attempts, history(row)) == ("new", 1, [])
    assert receipts(shop, 1) == 0  # the handler's write was rolled back with its failure
    (error,) = errors_of(shop, 1)
    assert "RuntimeError: boom after writing" in error.message


def test_failures_back_off_then_give_up(shop: SimpleNamespace, clock: ManualClock) -> None:
    add(shop.stator, shop.jobs(id=1, kind="fail"))
    for attempt, wait in ((1, 60.0), (2, 120.0)):
        before = clock.now()
        assert run(shop).errors == 1
        row = load(shop.stator, shop.jobs, 1)
        assert (row.state, row.state_attempts) == ("waiting", attempt)
        delay = (row.state_next - before).total_seconds()
        assert 0.85 * wait <= delay <= 1.15 * wait  # retry_after * backoff^(n-1), +-10%
        assert run(shop).claimed == 0
        clock.advance(delay + 1)
    run(shop)
    row = load(shop.stator, shop.jobs, 1)
    assert (row.state, row.state_attempts) == ("gave_up", 0)
    assert len(errors_of(shop, 1)) == 3


def test_try_again_later_costs_no_attempt(shop: SimpleNamespace, clock: ManualClock) -> None:
    add(shop.stator, shop.jobs(id=1, kind="later"))
    before = clock.now()
    assert run(shop).errors == 0
    row = load(shop.stator, shop.jobs, 1)
    assert (row.state, row.state_attempts) == ("waiting", 0)
    assert (row.state_next - before).total_seconds() == pytest.approx(600, abs=1)


def test_a_return_value_the_graph_refuses_is_a_failure(shop: SimpleNamespace) -> None:
    add(shop.stator, shop.jobs(id=1, kind="bad"))
    assert run(shop).errors == 1
    assert load(shop.stator, shop.jobs, 1).state_attempts == 1
    (error,) = errors_of(shop, 1)
    assert error.kind == "invalid"


def test_application_transition_wins_a_race_cleanly(shop: SimpleNamespace) -> None:
    add(shop.stator, shop.orders(id=1, paid=True, note="race"))
    report = run(shop)
    assert report.lost == 1  # the handler's fenced write was refused...
    row = load(shop.stator, shop.orders, 1)
    assert (row.state, history(row)) == ("charged", ["charged"])  # ...one move, not two
    assert receipts(shop, 1) == 0  # and its own writes rolled back with it


def test_transition_perform_is_checked_and_fenced(shop: SimpleNamespace) -> None:
    add(shop.stator, shop.orders(id=1, paid=False))
    stale = load(shop.stator, shop.orders, 1)
    with pytest.raises(TransitionError, match="no transition from new to shipped"):
        move(shop.stator, shop.orders, 1, OrderStates.shipped)
    move(shop.stator, shop.orders, 1, OrderStates.charged)
    row = load(shop.stator, shop.orders, 1)
    assert (row.state, row.state_next, history(row)) == ("charged", None, ["charged"])
    if alias_of(shop.stator):  # a Django instance moves itself, fenced by what it read
        with pytest.raises(TransitionConflict, match="no longer in state new"):
            stale.transition_perform(OrderStates.charged)
    move(shop.stator, shop.orders, 1, OrderStates.shipped)
    assert history(load(shop.stator, shop.orders, 1)) == ["charged", "shipped"]


def test_a_write_after_the_lease_was_taken_over_is_refused(
    shop: SimpleNamespace, clock: ManualClock
) -> None:
    add(shop.stator, shop.orders(id=1, paid=True))
    store = shop.stator.store
    tracked = tracked_of(shop.stator, shop.orders)
    [(_, first)] = store.claim(tracked, clock.now(), 10)
    clock.advance(OrderStates.new.lease + 1)  # the first claim's lease ran out...
    [(_, second)] = store.claim(tracked, clock.now(), 10)  # ...and another worker took it
    assert second.lease_until > first.lease_until
    late = after_run(OrderStates, first, Moved(OrderStates.charged), clock.now())
    assert store.write_all([(tracked, [late])]) == {tracked.name: {1}}
    assert load(shop.stator, shop.orders, 1).state == "new"
    current = after_run(OrderStates, second, Moved(OrderStates.charged), clock.now())
    assert store.write_all([(tracked, [current])]) == {tracked.name: set()}
    assert load(shop.stator, shop.orders, 1).state == "charged"


def test_rows_inserted_by_plain_sql_start_in_the_initial_state(shop: SimpleNamespace) -> None:
    """Database defaults, not the ORM's: a raw INSERT is picked up like any other row."""
    run_sql(shop.stator, f"INSERT INTO {table(shop.jobs)} (kind) VALUES ('ok')")
    report = run(shop)
    assert (report.claimed, report.transitions) == (1, 1)


def test_start_after_delays_the_first_attempt_of_an_async_handler(
    shop: SimpleNamespace, clock: ManualClock
) -> None:
    PACKED.clear()
    add(shop.stator, shop.parcels(id=1))
    run_sql(shop.stator, f"INSERT INTO {table(shop.parcels)} (id, priority) VALUES (2, 0)")
    assert run(shop).claimed == 0  # start_after=60
    clock.advance(61)
    report = run(shop)
    assert (report.claimed, report.transitions, report.errors) == (2, 2, 0)
    row = load(shop.stator, shop.parcels, 1)
    # What the handler left (stator_extra) was written with its transition.
    assert (row.state, row.label) == ("sent", "label 1")
    assert len(PACKED) == 2


def test_claims_take_the_highest_priority_first(
    shop: SimpleNamespace, clock: ManualClock
) -> None:
    ranks = {1: 1, 2: 5, 3: 0, 4: 5, 5: 3}
    add(shop.stator, *(shop.parcels(id=pk, priority=p) for pk, p in ranks.items()))
    clock.advance(61)
    store = shop.stator.store
    tracked = tracked_of(shop.stator, shop.parcels)
    claimed = [claim.pk for _, claim in store.claim(tracked, clock.now(), 3)]
    assert sorted(ranks[pk] for pk in claimed) == [3, 5, 5]
    assert sorted(ranks[c.pk] for _, c in store.claim(tracked, clock.now(), 3)) == [0, 1]


def test_a_late_result_is_not_written(shop: SimpleNamespace, clock: ManualClock) -> None:
    """Neither the transition nor what the handler left travels past a lost lease."""
    add(shop.stator, shop.parcels(id=1))
    clock.advance(61)
    store = shop.stator.store
    tracked = tracked_of(shop.stator, shop.parcels)
    [(_, first)] = store.claim(tracked, clock.now(), 10)
    clock.advance(ParcelStates.packed.lease + 1)
    assert run(shop).transitions == 1  # another worker's run, after the lease
    late = replace(after_run(ParcelStates, first, Moved(ParcelStates.sent), clock.now()),
                   extra={"label": "late"})
    assert store.write_all([(tracked, [late])]) == {tracked.name: {1}}
    assert load(shop.stator, shop.parcels, 1).label == "label 1"


def test_a_claimed_row_waits_for_its_lease(shop: SimpleNamespace, clock: ManualClock) -> None:
    add(shop.stator, shop.parcels(id=1))
    clock.advance(61)
    store = shop.stator.store
    tracked = tracked_of(shop.stator, shop.parcels)
    assert len(store.claim(tracked, clock.now(), 10)) == 1
    clock.advance(ParcelStates.packed.lease - 1)
    assert store.claim(tracked, clock.now(), 10) == []
    clock.advance(2)
    assert len(store.claim(tracked, clock.now(), 10)) == 1


def test_timed_edges_and_deletion(shop: SimpleNamespace, clock: ManualClock) -> None:
    add(shop.stator, shop.parcels(id=1), shop.parcels(id=2))
    clock.advance(61)
    run(shop)
    move(shop.stator, shop.parcels, 2, ParcelStates.delivered)
    clock.advance(99)
    run(shop)
    assert load(shop.stator, shop.parcels, 1).state == "sent"
    assert load(shop.stator, shop.parcels, 2).state == "delivered"
    clock.advance(2)  # past delete_after (100 s in delivered)
    run(shop)
    assert load(shop.stator, shop.parcels, 2) is None
    clock.advance(200)  # past the 300 s timed edge of sent
    assert run(shop).transitions == 1
    assert load(shop.stator, shop.parcels, 1).state == "lost"
