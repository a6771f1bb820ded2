"""The two hooks a model may declare for the engine's hot path, on both backends.

``stator_claim_priority`` names a column whose higher values are claimed first;
``stator_write_extra`` writes what a handler left in ``obj.stator_extra`` in the same
transaction as the row's fenced write, and only for rows whose fence held.  (The
``django.tasks`` backend uses both: task priority, and results without a transaction each.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Connection, Integer, String, insert, select, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from stator import ConfigError, State, StateGraph, Stator
from stator._policy import Moved, after_run
from stator.sqlalchemy import StatorMixin

SEEN: list[int] = []


class Ranked(StateGraph):
    new = State()
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        SEEN.append(row.id)
        if row.order < 0:  # a handler that also writes: the slow path
            row.order = 9
            row.stator_extra = {"result": "slow"}
            return cls.done
        row.stator_extra = {"result": f"done {row.id}"}
        return cls.done


def models(priority: str | None = "order", hook: bool = True) -> Any:
    class Base(DeclarativeBase):
        pass

    class Job(StatorMixin, Base):
        __tablename__ = "jobs"
        state_graph = Ranked
        id: Mapped[int] = mapped_column(primary_key=True)
        # A reserved word, so the claim's ORDER BY must quote it.
        order: Mapped[int] = mapped_column("order", Integer, default=0)
        result: Mapped[str | None] = mapped_column(String(100))

    if priority is not None:
        Job.stator_claim_priority = priority  # type: ignore[attr-defined]
    if hook:
        def write_extra(cls: Any, store: Any, conn: Connection, writes: Sequence[Any]) -> None:
            table = store.engine.dialect.identifier_preparer.quote("jobs")
            for w in writes:
                conn.execute(
                    text(f"UPDATE {table} SET result = :result WHERE id = :id"),
                    {"result": w.extra["result"], "id": w.pk},
                )

        Job.stator_write_extra = classmethod(write_extra)  # type: ignore[attr-defined]
    return Job


def results(stator: Stator, model: Any) -> dict[int, tuple[str, str | None]]:
    with Session(stator.engine) as session:
        return {r.id: (r.state, r.result) for r in session.scalars(select(model))}


def test_claims_take_the_highest_priority_first(backend: str, clock: Any, make_stator: Any) -> None:
    Job = models()
    stator = make_stator(backend, [Job], clock, batch_size=3)
    with stator.engine.begin() as conn:  # the oldest rows have the lowest priority
        conn.execute(insert(Job), [{"id": i, "order": i % 4} for i in range(1, 13)])
    SEEN.clear()
    stator.run_once()
    assert sorted(SEEN) == [3, 7, 11]  # priority 3, in due order
    SEEN.clear()
    stator.run_once()
    assert sorted(SEEN) == [2, 6, 10]


def test_without_a_priority_claims_go_by_due_time(
    backend: str, clock: Any, make_stator: Any
) -> None:
    Job = models(priority=None)
    stator = make_stator(backend, [Job], clock, batch_size=3)
    with stator.engine.begin() as conn:
        for i in range(1, 7):  # one statement each, so each row is due a little later
            conn.execute(insert(Job), [{"id": i, "order": i}])
    SEEN.clear()
    stator.run_once()
    assert sorted(SEEN) == [1, 2, 3]


def test_a_priority_that_is_not_a_column_is_refused(backend: str, clock: Any) -> None:
    Job = models(priority="urgency")
    with pytest.raises(ConfigError, match="urgency"):
        Stator(backend, [Job], clock=clock)


def test_extra_is_written_with_the_batched_transition(
    backend: str, clock: Any, make_stator: Any
) -> None:
    Job = models()
    stator = make_stator(backend, [Job], clock)
    with stator.engine.begin() as conn:
        conn.execute(insert(Job), [{"id": i} for i in (1, 2)])
    report = stator.run_once()
    assert report.transitions == 2
    assert results(stator, Job) == {1: ("done", "done 1"), 2: ("done", "done 2")}


def test_extra_is_written_with_a_handler_that_wrote(
    backend: str, clock: Any, make_stator: Any
) -> None:
    """The slow path: the handler's own changes, its transition and its extra, one commit."""
    Job = models()
    stator = make_stator(backend, [Job], clock)
    with stator.engine.begin() as conn:
        conn.execute(insert(Job), [{"id": 1, "order": -1}])
    stator.run_once()
    assert results(stator, Job) == {1: ("done", "slow")}
    with Session(stator.engine) as session:
        assert session.get(Job, 1).order == 9  # type: ignore[union-attr]


def test_extra_is_not_written_when_the_fence_no_longer_holds(
    backend: str, clock: Any, make_stator: Any
) -> None:
    """A late result (its lease expired and the row was claimed again) must not land."""
    Job = models()
    stator = make_stator(backend, [Job], clock)
    with stator.engine.begin() as conn:
        conn.execute(insert(Job), [{"id": 1}])
    tracked = stator.store.tracked[0]
    [(_, slow)] = stator.store.claim(tracked, clock.now(), 10)
    clock.advance(Ranked.new.lease + 1)
    [(_, fast)] = stator.store.claim(tracked, clock.now(), 10)

    stale = after_run(Ranked, slow, Moved(Ranked.done), clock.now())
    stale = replace(stale, extra={"result": "late"})
    assert stator.store.write_all([(tracked, [stale])]) == {"jobs": {1}}
    assert results(stator, Job) == {1: ("new", None)}

    current = after_run(Ranked, fast, Moved(Ranked.done), clock.now())
    current = replace(current, extra={"result": "on time"})
    assert stator.store.write_all([(tracked, [current])]) == {"jobs": set()}
    assert results(stator, Job) == {1: ("done", "on time")}


def test_extra_without_a_hook_is_a_handler_error(
    backend: str, clock: Any, make_stator: Any
) -> None:
    Job = models(hook=False)
    stator = make_stator(backend, [Job], clock)
    with stator.engine.begin() as conn:
        conn.execute(insert(Job), [{"id": 1}])
    report = stator.run_once(raise_errors=False)
    assert report.transitions == 0
    [error] = stator.status()["errors"]
    assert "stator_write_extra" in error["message"]
    assert results(stator, Job) == {1: ("new", None)}


HELD: list[bool] = []


class Leased(StateGraph):
    new = State()
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        HELD.append(row.held_until is not None and row.held_until == row.state_next)
        return cls.done


def leased_model(column: str = "held_until") -> Any:
    from stator._types import UTCDateTime

    class Base(DeclarativeBase):
        pass

    class Job(StatorMixin, Base):
        __tablename__ = "leased_jobs"
        state_graph = Leased
        id: Mapped[int] = mapped_column(primary_key=True)
        held_until: Mapped[Any] = mapped_column(UTCDateTime(), nullable=True)

    Job.stator_lease_column = column  # type: ignore[attr-defined]
    return Job


def test_the_claim_copies_its_lease_into_the_lease_column(
    backend: str, clock: Any, make_stator: Any
) -> None:
    """While a handler runs, its row's lease column equals ``state_next`` (another reader can
    tell the row is held); the write that ends the attempt moves ``state_next`` on."""
    Job = leased_model()
    stator = make_stator(backend, [Job], clock)
    with stator.engine.begin() as conn:
        conn.execute(insert(Job), [{"id": i} for i in range(1, 4)])
    HELD.clear()
    stator.run_once()
    assert HELD == [True, True, True]
    with Session(stator.engine) as session:
        rows = list(session.scalars(select(Job)))
    assert all(r.state == "done" and r.held_until is not None for r in rows)
    assert all(r.held_until != r.state_next for r in rows)


def test_a_lease_column_that_is_not_a_column_is_refused(backend: str, clock: Any) -> None:
    Job = leased_model("claimed_until")
    with pytest.raises(ConfigError, match="claimed_until"):
        Stator(backend, [Job], clock=clock)


STAMPED: list[tuple[Any, Any]] = []


class Stamped(StateGraph):
    """``new`` runs a handler (failing while ``note`` says so); ``done`` has no handler, only
    a timed edge to ``archived``."""

    new = State(retry_after=60, max_attempts=2)
    done = State(externally_progressed=True)
    archived = State()
    given_up = State()
    new.transitions_to(done)
    new.fails_to(given_up)
    done.times_out_to(archived, 3600)

    @classmethod
    def check_new(cls, row: Any) -> State:
        STAMPED.append((row.first_at, row.last_at))
        if row.note == "fail":
            raise RuntimeError("the handler broke")
        return cls.done


def stamped_model(stamps: dict[str, str] | None = None, failures: bool = True) -> Any:
    from stator._types import UTCDateTime

    class Base(DeclarativeBase):
        pass

    class Job(StatorMixin, Base):
        __tablename__ = "stamped_jobs"
        state_graph = Stamped
        id: Mapped[int] = mapped_column(primary_key=True)
        note: Mapped[str | None] = mapped_column(String(20))
        first_at: Mapped[Any] = mapped_column(UTCDateTime(), nullable=True)
        last_at: Mapped[Any] = mapped_column(UTCDateTime(), nullable=True)
        result: Mapped[str | None] = mapped_column(String(200))

    Job.stator_claim_stamps = (  # type: ignore[attr-defined]
        {"first_at": "first", "last_at": "each"} if stamps is None else stamps
    )

    def write_extra(cls: Any, store: Any, conn: Connection, writes: Sequence[Any]) -> None:
        for w in writes:
            conn.execute(text("UPDATE stamped_jobs SET result = :result WHERE id = :id"),
                         {"result": w.extra["result"], "id": w.pk})

    def failure_extra(cls: Any, row: Any, write: Any, error: BaseException | None) -> Any:
        return {"result": f"{write.failure.kind} {type(error).__name__} -> {write.state}"}

    Job.stator_write_extra = classmethod(write_extra)  # type: ignore[attr-defined]
    if failures:
        Job.stator_failure_extra = classmethod(failure_extra)  # type: ignore[attr-defined]
    return Job


def test_the_claim_stamps_the_rows_it_takes_up_for_a_handler(
    backend: str, clock: Any, make_stator: Any
) -> None:
    """"first" keeps the first attempt's time, "each" moves with every attempt; a row
    claimed for a timed edge (no handler) keeps its stamps."""
    Job = stamped_model()
    stator = make_stator(backend, [Job], clock)
    with stator.engine.begin() as conn:
        conn.execute(insert(Job), [{"id": 1, "note": "fail"}])
    first = clock.now()
    STAMPED.clear()
    stator.run_once(raise_errors=False)
    with stator.engine.begin() as conn:
        conn.execute(text("UPDATE stamped_jobs SET note = 'fine'"))
    clock.advance(120)
    stator.run_once()
    assert [(first, first), (first, clock.now())] == STAMPED  # as the handler saw its row
    done_at = clock.now()
    clock.advance(3601)
    stator.run_once()  # claimed for its timed edge: no handler, no stamp
    with Session(stator.engine) as session:
        row = session.get(Job, 1)
        assert row is not None and row.state == "archived"
        assert (row.first_at, row.last_at) == (first, done_at)


def test_claim_stamps_must_name_columns_and_a_rule(backend: str, clock: Any) -> None:
    with pytest.raises(ConfigError, match="started_on"):
        Stator(backend, [stamped_model({"started_on": "first"})], clock=clock)
    with pytest.raises(ConfigError, match="always"):
        Stator(backend, [stamped_model({"first_at": "always"})], clock=clock)


def test_a_failure_write_carries_the_models_own_record_of_it(
    backend: str, clock: Any, make_stator: Any
) -> None:
    """``stator_failure_extra``: each failure of the engine's is also written to the row, in
    the failure's own write (the last one too, into the state it gives up to)."""
    Job = stamped_model()
    stator = make_stator(backend, [Job], clock)
    with stator.engine.begin() as conn:
        conn.execute(insert(Job), [{"id": 1, "note": "fail"}])
    stator.run_once(raise_errors=False)
    with Session(stator.engine) as session:
        assert session.get(Job, 1).result == "error RuntimeError -> new"  # type: ignore[union-attr]
    clock.advance(120)
    stator.run_once(raise_errors=False)
    with Session(stator.engine) as session:
        row = session.get(Job, 1)
        assert row is not None and row.state == "given_up"
        assert row.result == "error RuntimeError -> given_up"


def test_without_a_failure_hook_a_failure_writes_nothing_else(
    backend: str, clock: Any, make_stator: Any
) -> None:
    Job = stamped_model(failures=False)
    stator = make_stator(backend, [Job], clock)
    with stator.engine.begin() as conn:
        conn.execute(insert(Job), [{"id": 1, "note": "fail"}])
    stator.run_once(raise_errors=False)
    with Session(stator.engine) as session:
        assert session.get(Job, 1).result is None  # type: ignore[union-attr]


def test_write_columns_must_name_columns_and_a_kind_and_exclude_the_hook(
    backend: str, clock: Any
) -> None:
    """``stator_write_columns`` is checked when the model is taken on: a column that is not
    the table's, a kind that is not one of ``_write_columns.KINDS``, and a model that also
    has ``stator_write_extra`` (one way to write ``stator_extra``) are refused."""
    model = models(hook=False)
    model.stator_write_columns = {"outcome": "value"}
    with pytest.raises(ConfigError, match="outcome"):
        Stator(backend, [model], clock=clock)
    model.stator_write_columns = {"result": "blob"}
    with pytest.raises(ConfigError, match="blob"):
        Stator(backend, [model], clock=clock)
    both = models()
    both.stator_write_columns = {"result": "value"}
    with pytest.raises(ConfigError, match="both"):
        Stator(backend, [both], clock=clock)


def test_write_columns_carry_the_handlers_values(
    backend: str, clock: Any, make_stator: Any
) -> None:
    """A model with ``stator_write_columns`` and no hook: what the handler left is written
    with the transition, by the fenced write itself (also when the handler wrote too)."""
    model = models(hook=False)
    model.stator_write_columns = {"result": "value"}
    stator = make_stator(backend, [model], clock)
    with stator.engine.begin() as conn:
        conn.execute(insert(model), [{"id": 1, "order": 0}, {"id": 2, "order": -1}])
    assert stator.run_once().transitions == 2
    assert results(stator, model) == {1: ("done", "done 1"), 2: ("done", "slow")}


@pytest.mark.parametrize(("hook", "value", "named"), [
    ("stator_write_columns", {"state": "value"}, "state"),
    ("stator_write_columns", {"state_next": "time"}, "state_next"),
    ("stator_write_columns", {"id": "value"}, "id"),
    ("stator_claim_stamps", {"state_next": "each"}, "state_next"),
    ("stator_claim_stamps", {"state_changed": "first"}, "state_changed"),
    ("stator_lease_column", "state_next", "state_next"),
    ("stator_lease_column", "id", "id"),
])
def test_a_hook_may_not_name_a_column_the_engine_writes(
    backend: str, clock: Any, hook: str, value: Any, named: str
) -> None:
    """A hook that named ``state`` would let a handler's value stand in for the engine's
    move (one statement setting it twice; on SQLite the last one wins), one that named
    ``state_next`` would overwrite the claim's fencing token: refused with what it named."""
    model = models(hook=False)
    setattr(model, hook, value)
    with pytest.raises(ConfigError, match=f"{hook} names '{named}'"):
        Stator(backend, [model], clock=clock)


def test_a_write_column_may_not_be_the_lease_column(backend: str, clock: Any) -> None:
    """The lease column is how a limited claim counts running rows: a handler's value there
    would free or fill a limit's room."""
    model = models(hook=False)
    model.stator_lease_column = "result"
    model.stator_write_columns = {"result": "value"}
    with pytest.raises(ConfigError, match="stator_write_columns names 'result', which holds"):
        Stator(backend, [model], clock=clock)
