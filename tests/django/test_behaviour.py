"""One behavioural suite, run on {SQLAlchemy, Django} x {SQLite, PostgreSQL}.

The same graphs (``djtest.orders.models``) drive a SQLAlchemy model and a Django model; each
``Side`` hides only how rows are inserted, read and moved by the application.  The engine
underneath is the same: only the store differs.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connections
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
from sqlalchemy import JSON, Engine, String, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from stator import CycleReport, ManualClock, State, Stator, TransitionConflict, TransitionError
from stator._policy import Moved, after_run
from stator.django._setup import build_stator
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


# -- the two sides ---------------------------------------------------------------------------


class Side:
    """What a test needs from an integration besides the engine."""

    stator: Stator
    orders: type
    jobs: type
    parcels: type

    def add(self, model: type, **fields: Any) -> Any:
        raise NotImplementedError

    def row(self, model: type, pk: Any) -> Any:
        raise NotImplementedError

    def row_or_none(self, model: type, pk: Any) -> Any:
        try:
            return self.row(model, pk)
        except Exception:
            return None

    def receipts(self, pk: Any) -> int:
        raise NotImplementedError

    def move(self, model: type, pk: Any, to: State) -> None:
        raise NotImplementedError

    def insert_sql(self, sql: str) -> None:
        """Run an INSERT the way an application's own SQL would, outside any ORM."""
        raise NotImplementedError

    def table(self, model: type) -> str:
        raise NotImplementedError

    def run(self) -> CycleReport:
        return self.stator.run_once(raise_errors=False)

    def errors(self, pk: Any) -> list[dict[str, Any]]:
        """This test's failure records of row ``pk`` (Django's flush between tests leaves
        Stator's own tables alone, and primary keys may be reused)."""
        return [e for e in self.stator.store.recent_errors(100)
                if e["row_pk"] == str(pk) and e["id"] > self.errors_before]

    def mark_errors(self) -> None:
        self.errors_before = max((e["id"] for e in self.stator.store.recent_errors(1)), default=0)


class SqlAlchemySide(Side):
    def __init__(self, url: str, clock: ManualClock) -> None:
        self.stator = Stator(url, [SAOrder, SAJob, SAParcel], clock=clock)
        Base.metadata.create_all(self.stator.engine)
        self.stator.migrate()
        self.engine: Engine = self.stator.engine
        self.orders, self.jobs, self.parcels = SAOrder, SAJob, SAParcel
        self.mark_errors()

    def add(self, model: type, **fields: Any) -> Any:
        with Session(self.engine) as session:
            obj = model(**fields)
            session.add(obj)
            session.commit()
            return obj.id

    def row(self, model: type, pk: Any) -> Any:
        with Session(self.engine, expire_on_commit=False) as session:
            return session.get(model, pk)

    def receipts(self, pk: Any) -> int:
        with Session(self.engine) as session:
            query = select(func.count()).select_from(SAReceipt).where(SAReceipt.order_id == pk)
            return int(session.scalar(query) or 0)

    def move(self, model: type, pk: Any, to: State) -> None:
        with Session(self.engine) as session:
            obj = session.get(model, pk)
            obj.transition_perform(to, clock=self.stator.clock)  # type: ignore[union-attr]
            session.commit()

    def insert_sql(self, sql: str) -> None:
        with self.engine.begin() as conn:
            conn.exec_driver_sql(sql)

    def table(self, model: Any) -> str:
        return str(model.__tablename__)


class DjangoSide(Side):
    def __init__(self, alias: str, clock: ManualClock) -> None:
        self.alias = alias
        self.stator = build_stator(models=[Order, Job, Parcel], clock=clock, alias=alias)
        self.orders, self.jobs, self.parcels = Order, Job, Parcel
        self.mark_errors()

    def add(self, model: Any, **fields: Any) -> Any:
        return model.objects.using(self.alias).create(**fields).pk

    def row(self, model: Any, pk: Any) -> Any:
        return model.objects.using(self.alias).get(pk=pk)

    def receipts(self, pk: Any) -> int:
        return int(Receipt.objects.using(self.alias).filter(order_id=pk).count())

    def move(self, model: Any, pk: Any, to: State) -> None:
        self.row(model, pk).transition_perform(to, clock=self.stator.clock)

    def insert_sql(self, sql: str) -> None:
        with connections[self.alias].cursor() as cursor:
            cursor.execute(sql)

    def table(self, model: Any) -> str:
        return str(model._meta.db_table)


@pytest.fixture
def clock() -> ManualClock:
    """Ahead of real time: rows inserted now (database clock) are due for the engine."""
    from datetime import UTC, datetime

    return ManualClock(datetime.now(UTC) + timedelta(minutes=1))


@pytest.fixture(params=["sqlalchemy-sqlite", "sqlalchemy-postgresql", "django-sqlite",
                        "django-postgresql"])
def side(request: pytest.FixtureRequest, clock: ManualClock, tmp_path: Any) -> Iterator[Side]:
    integration, database = request.param.split("-")
    if integration == "django":
        request.applymarker(pytest.mark.django_db(transaction=True, databases=["default", "pg"]))
        request.getfixturevalue("_django_db_helper")
        yield DjangoSide("default" if database == "sqlite" else "pg", clock)
        return
    if database == "sqlite":
        made = SqlAlchemySide(f"sqlite:///{tmp_path / 'sa.db'}", clock)
    else:
        admin: psycopg.Connection[Any] = request.getfixturevalue("pg_admin")
        pg_database: str = request.getfixturevalue("pg_database")
        schema = f"t_{secrets.token_hex(6)}"
        admin.execute(f'CREATE SCHEMA "{schema}"')
        made = SqlAlchemySide(
            f"postgresql+psycopg://postgres@127.0.0.1:5432/{pg_database}"
            f"?options=-csearch_path%3D{schema}", clock,
        )
    yield made
    made.stator.dispose()


def history(obj: Any) -> list[str]:
    return [entry[0] for entry in (obj.state_history or [])]


# -- the suite -------------------------------------------------------------------------------


def test_paid_orders_move_and_unpaid_retry_later(side: Side, clock: ManualClock) -> None:
    paid = side.add(side.orders, paid=True)
    unpaid = side.add(side.orders, paid=False)
    report = side.run()
    assert (report.claimed, report.transitions, report.errors) == (2, 1, 0)
    row = side.row(side.orders, paid)
    assert (row.state, history(row), side.receipts(paid)) == ("charged", ["charged"], 1)
    row = side.row(side.orders, unpaid)
    assert (row.state, row.state_attempts, side.receipts(unpaid)) == ("new", 0, 0)
    assert side.run().claimed == 0  # "not yet": due again after retry_after (30 s)
    clock.advance(31)
    assert side.run().claimed == 1


def test_handler_writes_commit_only_with_its_transition(side: Side) -> None:
    pk = side.add(side.orders, paid=True, note="fail-after-write")
    report = side.run()
    assert report.errors == 1
    row = side.row(side.orders, pk)
    assert (row.state, row.state_attempts, history(row)) == ("new", 1, [])
    assert side.receipts(pk) == 0  # the handler's write was rolled back with its failure
    (error,) = side.errors(pk)
    assert "RuntimeError: boom after writing" in error["message"]


def test_failures_back_off_then_give_up(side: Side, clock: ManualClock) -> None:
    pk = side.add(side.jobs, kind="fail")
    for attempt, wait in ((1, 60.0), (2, 120.0)):
        before = clock.now()
        assert side.run().errors == 1
        row = side.row(side.jobs, pk)
        assert (row.state, row.state_attempts) == ("waiting", attempt)
        delay = (row.state_next - before).total_seconds()
        assert 0.85 * wait <= delay <= 1.15 * wait  # retry_after * backoff^(n-1), +-10%
        assert side.run().claimed == 0
        clock.advance(delay + 1)
    side.run()
    row = side.row(side.jobs, pk)
    assert (row.state, row.state_attempts) == ("gave_up", 0)
    assert len(side.errors(pk)) == 3


def test_try_again_later_costs_no_attempt(side: Side, clock: ManualClock) -> None:
    pk = side.add(side.jobs, kind="later")
    before = clock.now()
    assert side.run().errors == 0
    row = side.row(side.jobs, pk)
    assert (row.state, row.state_attempts) == ("waiting", 0)
    assert (row.state_next - before).total_seconds() == pytest.approx(600, abs=1)


def test_a_return_value_the_graph_refuses_is_a_failure(side: Side) -> None:
    pk = side.add(side.jobs, kind="bad")
    assert side.run().errors == 1
    assert side.row(side.jobs, pk).state_attempts == 1
    (error,) = side.errors(pk)
    assert error["kind"] == "invalid"


def test_application_transition_wins_a_race_cleanly(side: Side) -> None:
    pk = side.add(side.orders, paid=True, note="race")
    report = side.run()
    assert report.lost == 1  # the handler's fenced write was refused...
    row = side.row(side.orders, pk)
    assert (row.state, history(row)) == ("charged", ["charged"])  # ...one move, not two
    assert side.receipts(pk) == 0  # and its own writes rolled back with it


def test_transition_perform_is_checked_and_fenced(side: Side) -> None:
    pk = side.add(side.orders, paid=False)
    stale = side.row(side.orders, pk)
    with pytest.raises(TransitionError, match="no transition from new to shipped"):
        side.move(side.orders, pk, OrderStates.shipped)
    side.move(side.orders, pk, OrderStates.charged)
    row = side.row(side.orders, pk)
    assert (row.state, row.state_next, history(row)) == ("charged", None, ["charged"])
    if isinstance(side, DjangoSide):
        with pytest.raises(TransitionConflict, match="no longer in state new"):
            stale.transition_perform(OrderStates.charged)
    side.move(side.orders, pk, OrderStates.shipped)
    assert history(side.row(side.orders, pk)) == ["charged", "shipped"]


def test_a_write_after_the_lease_was_taken_over_is_refused(
    side: Side, clock: ManualClock
) -> None:
    pk = side.add(side.orders, paid=True)
    store = side.stator.store
    tracked = next(t for t in store.tracked if t.model is side.orders)
    [(_, first)] = store.claim(tracked, clock.now(), 10)
    clock.advance(OrderStates.new.lease + 1)  # the first claim's lease ran out...
    [(_, second)] = store.claim(tracked, clock.now(), 10)  # ...and another worker took it
    assert second.lease_until > first.lease_until
    late = after_run(OrderStates, first, Moved(OrderStates.charged), clock.now())
    assert store.write_all([(tracked, [late])]) == {tracked.name: {pk}}
    assert side.row(side.orders, pk).state == "new"
    current = after_run(OrderStates, second, Moved(OrderStates.charged), clock.now())
    assert store.write_all([(tracked, [current])]) == {tracked.name: set()}
    assert side.row(side.orders, pk).state == "charged"


def test_rows_inserted_by_plain_sql_start_in_the_initial_state(
    side: Side, clock: ManualClock
) -> None:
    """Database defaults, not the ORM's: a raw INSERT is picked up like any other row."""
    side.insert_sql(f"INSERT INTO {side.table(side.jobs)} (kind) VALUES ('ok')")
    report = side.run()
    assert (report.claimed, report.transitions) == (1, 1)


def test_start_after_delays_the_first_attempt_of_an_async_handler(
    side: Side, clock: ManualClock
) -> None:
    PACKED.clear()
    pk = side.add(side.parcels)
    side.insert_sql(f"INSERT INTO {side.table(side.parcels)} (priority) VALUES (0)")
    assert side.run().claimed == 0  # start_after=60
    clock.advance(61)
    report = side.run()
    assert (report.claimed, report.transitions, report.errors) == (2, 2, 0)
    row = side.row(side.parcels, pk)
    # What the handler left (stator_extra) was written with its transition.
    assert (row.state, row.label) == ("sent", f"label {pk}")
    assert len(PACKED) == 2


def test_claims_take_the_highest_priority_first(side: Side, clock: ManualClock) -> None:
    ranks = {side.add(side.parcels, priority=p): p for p in (1, 5, 0, 5, 3)}
    clock.advance(61)
    store = side.stator.store
    tracked = next(t for t in store.tracked if t.model is side.parcels)
    claimed = [claim.pk for _, claim in store.claim(tracked, clock.now(), 3)]
    assert sorted(ranks[pk] for pk in claimed) == [3, 5, 5]
    assert sorted(ranks[pk] for _, c in store.claim(tracked, clock.now(), 3) for pk in [c.pk]) \
        == [0, 1]


def test_a_late_result_is_not_written(side: Side, clock: ManualClock) -> None:
    """Neither the transition nor what the handler left travels past a lost lease."""
    pk = side.add(side.parcels)
    clock.advance(61)
    store = side.stator.store
    tracked = next(t for t in store.tracked if t.model is side.parcels)
    [(_, first)] = store.claim(tracked, clock.now(), 10)
    clock.advance(ParcelStates.packed.lease + 1)
    assert side.run().transitions == 1  # another worker's run, after the lease
    late = replace(after_run(ParcelStates, first, Moved(ParcelStates.sent), clock.now()),
                   extra={"label": "late"})
    assert store.write_all([(tracked, [late])]) == {tracked.name: {pk}}
    assert side.row(side.parcels, pk).label == f"label {pk}"


def test_a_claimed_row_waits_for_its_lease(side: Side, clock: ManualClock) -> None:
    side.add(side.parcels)
    clock.advance(61)
    store = side.stator.store
    tracked = next(t for t in store.tracked if t.model is side.parcels)
    assert len(store.claim(tracked, clock.now(), 10)) == 1
    clock.advance(ParcelStates.packed.lease - 1)
    assert store.claim(tracked, clock.now(), 10) == []
    clock.advance(2)
    assert len(store.claim(tracked, clock.now(), 10)) == 1


def test_timed_edges_and_deletion(side: Side, clock: ManualClock) -> None:
    stuck = side.add(side.parcels)
    arrived = side.add(side.parcels)
    clock.advance(61)
    side.run()
    side.move(side.parcels, arrived, ParcelStates.delivered)
    clock.advance(99)
    side.run()
    assert side.row(side.parcels, stuck).state == "sent"
    assert side.row(side.parcels, arrived).state == "delivered"
    clock.advance(2)  # past delete_after (100 s in delivered)
    side.run()
    assert side.row_or_none(side.parcels, arrived) is None
    clock.advance(200)  # past the 300 s timed edge of sent
    assert side.run().transitions == 1
    assert side.row(side.parcels, stuck).state == "lost"


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
def test_a_django_worker_holds_a_bounded_number_of_connections() -> None:
    """CONCURRENCY handler threads + coordinator + writer + listener, whatever CONN_MAX_AGE
    says, and all of them closed when the worker ends (Takahē ran out of slots)."""
    Order.objects.using("pg").bulk_create([Order(paid=True) for _ in range(200)])
    stator = build_stator(models=[Order], alias="pg", concurrency=3)
    worker = stator.worker(until_idle=True)
    name = connections["pg"].settings_dict["NAME"]
    with psycopg.connect(host="127.0.0.1", user="postgres", dbname=name,
                         autocommit=True) as watcher:

        def count() -> int:
            row = watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                                  "AND pid <> pg_backend_pid()", [name]).fetchone()
            return int(row[0]) if row else 0

        baseline = count()  # the test's own Django connection

        def run() -> None:
            try:
                worker.run()
            finally:
                worker.store.thread_done()

        runner = threading.Thread(target=run)
        runner.start()
        most = 0
        while runner.is_alive():
            most = max(most, count() - baseline)
            runner.join(0.01)
        assert 0 < most <= 3 + 3
        deadline = time.monotonic() + 30
        while count() > baseline and time.monotonic() < deadline:
            time.sleep(0.05)  # closing is asynchronous on the server's side
        assert count() == baseline
    assert Order.objects.using("pg").filter(state="charged").count() == 200
