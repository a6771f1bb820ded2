"""Plain rows (``StateGraph.plain_rows``, ``State(plain_rows=…)``), on every integration and
database: the handler gets a read-only object built from the claim, with the values (and
types) the ORM's instance would have had, and everything else behaves as with ORM rows."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from app_side import add, alias_of, errors, load, write_in_handler
from django.apps.registry import Apps
from django.db import connections
from django.db import models as dj
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import JSON, Boolean, Integer, String, inspect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from stator import PlainRowError, State, StateGraph, TryAgainLater
from stator._execute import Executor
from stator._plain_rows import PlainRow
from stator.django.fields import StatorDateTimeField
from stator.django.models import StatorModel
from stator.sqlalchemy import StatorMixin, UTCDateTime

SEEN: dict[str, Any] = {}


def _columns(row: Any, names: list[str]) -> dict[str, Any]:
    return {name: getattr(row, name) for name in names}


class Probe(StateGraph):
    """The same row seen by an ORM handler, then by a plain one."""

    orm_step = State()
    plain_step = State(plain_rows=True)
    done = State()
    orm_step.transitions_to(plain_step)
    plain_step.transitions_to(done)

    @classmethod
    def check_orm_step(cls, row: Any) -> State:
        SEEN[f"orm {row.id}"] = row
        return cls.plain_step

    @classmethod
    def check_plain_step(cls, row: Any) -> State:
        SEEN[f"plain {row.id}"] = row
        return cls.done


def item_model(integration: str, graph: type[StateGraph], table: str = "items") -> Any:
    """A model with a column of each kind a handler reads: text, numbers, a flag, JSON and
    a time, as each integration declares them."""
    if integration.startswith("django"):
        registry = Apps()

        class DjangoItem(StatorModel):
            state_graph = graph
            label = dj.CharField(max_length=60, null=True)
            count = dj.IntegerField(default=0)
            flag = dj.BooleanField(default=False)
            payload = dj.JSONField(null=True)
            at = StatorDateTimeField(null=True)

            class Meta:
                apps = registry
                app_label = "engine_suite"
                db_table = table

        return DjangoItem

    class Base(DeclarativeBase):
        pass

    class Item(StatorMixin, Base):
        __tablename__ = table
        state_graph = graph
        id: Mapped[int] = mapped_column(primary_key=True)
        label: Mapped[str | None] = mapped_column(String(60))
        count: Mapped[int] = mapped_column(Integer, default=0)
        flag: Mapped[bool] = mapped_column(Boolean, default=False)
        payload: Mapped[Any] = mapped_column(JSON, nullable=True)
        at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    return Item


def column_names(model: Any) -> list[str]:
    if hasattr(model, "_meta"):
        return [f.attname for f in model._meta.concrete_fields]
    return [c.key for c in inspect(model).column_attrs]


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",),
                              exclude_characters="\x00"), max_size=20)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_values = st.fixed_dictionaries({
    "label": st.none() | st.text(st.characters(codec="utf-8", exclude_categories=("Cs",),
                                               exclude_characters="\x00"), max_size=60),
    "count": st.integers(-(2**31), 2**31 - 1),
    "flag": st.booleans(),
    "payload": st.none() | st.dictionaries(_text, _json, max_size=4) | st.lists(_json, max_size=4),
    "at": st.none() | st.datetimes(datetime(1970, 1, 2), datetime(2200, 1, 1),
                                   timezones=st.just(UTC)),
})


def test_a_plain_row_holds_what_the_orm_instance_holds(
    backend, clock, make_stator, integration
):
    """Each value (and its type) as the ORM's instance of the same claimed row has it, and
    as it was written; the engine's own columns with their types too."""
    model = item_model(integration, Probe)
    stator = make_stator(backend, [model], clock)
    names = column_names(model)
    ids = itertools.count(1)

    @settings(max_examples=15)
    @given(values=_values)
    def check(values: dict[str, Any]) -> None:
        pk = next(ids)
        add(stator, model(id=pk, **values))
        SEEN.clear()
        stator.run_once()
        stator.run_once()
        orm, plain = SEEN[f"orm {pk}"], SEEN[f"plain {pk}"]
        assert isinstance(orm, model) and isinstance(plain, PlainRow)
        assert not isinstance(plain, model)
        seen_orm, seen_plain = _columns(orm, names), _columns(plain, names)
        assert seen_orm["state"] == "orm_step" and seen_plain["state"] == "plain_step"
        for name in names:
            if name in ("state", "state_changed", "state_next"):  # moved in between
                continue
            assert seen_plain[name] == seen_orm[name], name
            assert type(seen_plain[name]) is type(seen_orm[name]), name
        assert {k: seen_plain[k] for k in values} == values
        assert seen_plain["id"] == pk and seen_plain["state_attempts"] == 0
        for name in ("state_changed", "state_next"):
            assert type(seen_plain[name]) is datetime, name
            assert seen_plain[name].utcoffset() == timedelta(0), name
        assert seen_plain["state_changed"] == load(stator, model, pk).state_changed

    check()


# -- read-only ---------------------------------------------------------------------------------


class Writes(StateGraph):
    plain_rows = True
    new = State(max_attempts=1)
    done = State()
    failed = State()
    new.transitions_to(done)
    new.fails_to(failed)

    @classmethod
    def check_new(cls, row: Any) -> State:
        if row.label == "extra":
            row.stator_extra = {"left": "for the write"}  # the one attribute allowed
            return cls.done
        row.label = "changed"
        return cls.done


@pytest.mark.parametrize("handler", ["sync", "async"])
def test_setting_an_attribute_of_a_plain_row_fails_the_attempt_and_says_how_to_opt_out(
    backend, clock, make_stator, integration, handler
):
    graph: type[StateGraph] = Writes
    if handler == "async":
        class AsyncWrites(StateGraph):
            plain_rows = True
            new = State(max_attempts=1)
            done = State()
            failed = State()
            new.transitions_to(done)
            new.fails_to(failed)

            @classmethod
            async def check_new(cls, row: Any) -> State:
                await asyncio.sleep(0)
                row.label = "changed"
                return cls.done

        graph = AsyncWrites
    model = item_model(integration, graph)
    stator = make_stator(backend, [model], clock)
    add(stator, model(id=1, label="as inserted"))
    with pytest.raises(PlainRowError, match="setting 'label' is refused") as raised:
        stator.run_once()
    assert isinstance(raised.value, AttributeError)
    message = str(raised.value)
    assert "state 'new'" in message and "State(plain_rows=False)" in message
    assert graph.__name__ in message
    row = load(stator, model, 1)
    assert (row.state, row.label) == ("failed", "as inserted")
    (error,) = errors(stator)
    assert error["kind"] == "error" and "PlainRowError" in error["message"]


def test_stator_extra_may_be_set_and_is_not_dropped(backend, clock, make_stator, integration):
    """``stator_extra`` is for the write: without a ``stator_write_extra`` hook to write it,
    the attempt fails saying so, exactly as with an ORM row."""
    model = item_model(integration, Writes)
    stator = make_stator(backend, [model], clock)
    add(stator, model(id=1, label="extra"))
    stator.run_once(raise_errors=False)
    assert load(stator, model, 1).state == "failed"
    (error,) = errors(stator)
    assert "stator_write_extra" in error["message"]


# -- the same outcomes as ORM rows ---------------------------------------------------------


def behaving(plain: bool) -> type[StateGraph]:
    """A handler whose outcome the row's label decides: every outcome a handler can have."""

    class Behaving(StateGraph):
        plain_rows = plain
        new = State(retry_after=30, max_attempts=2)
        done = State(delete_after=10)
        failed = State()
        new.transitions_to(done)
        new.fails_to(failed)

        @classmethod
        def check_new(cls, row: Any) -> Any:
            assert isinstance(row, PlainRow) is plain
            if row.label == "move":
                return cls.done
            if row.label == "later":
                raise TryAgainLater(5)
            if row.label == "boom":
                raise ValueError(f"boom {row.id}")
            if row.label == "bad":
                return "nowhere"
            return None

    return Behaving


def _snapshot(stator: Any, model: Any) -> dict[int, Any]:
    now = stator.clock.now()
    rows = {}
    for pk in range(1, 6):
        row = load(stator, model, pk)
        rows[pk] = None if row is None else (
            row.state, row.state_attempts,
            None if row.state_next is None else round((row.state_next - now).total_seconds(), 3),
        )
    return rows


def test_plain_rows_move_stay_retry_fail_and_are_deleted_as_orm_rows_are(
    backend, clock, make_stator, integration
):
    labels = ["move", "stay", "later", "boom", "bad"]
    runs = {}
    for plain in (False, True):
        model = item_model(integration, behaving(plain), table=f"items_{int(plain)}")
        stator = make_stator(backend, [model], clock)
        for pk, label in enumerate(labels, start=1):
            add(stator, model(id=pk, label=label))
        snapshots = []
        for step in (0, 40, 40):
            clock.advance(step)
            stator.run_once(raise_errors=False)
            snapshots.append(_snapshot(stator, model))
        recorded = sorted(
            (e["row_pk"], e["state"], e["attempt"], e["kind"], e["message"].splitlines()[0])
            for e in errors(stator) if e["table"] == f"items_{int(plain)}"
        )
        runs[plain] = (snapshots, recorded)
    assert runs[True] == runs[False]
    snapshots, recorded = runs[True]
    first, second = snapshots[0], snapshots[1]  # {pk: (state, attempts, due in)}
    assert first[1][0] == "done" and first[2] == ("new", 0, 30.0)
    assert first[3] == ("new", 0, 5.0) and first[4][:2] == first[5][:2] == ("new", 1)
    assert second[1] is None  # deleted 10 s after it was done
    assert second[4][0] == second[5][0] == "failed"
    assert {kind for _pk, _state, _attempt, kind, _message in recorded} == {"error", "invalid"}


# -- per-state overrides, both ways ----------------------------------------------------------


class Mixed(StateGraph):
    """Plain rows by default; ``write`` asks for the ORM instance, and writes with it."""

    plain_rows = True
    read = State()
    write = State(plain_rows=False)
    done = State()
    read.transitions_to(write)
    write.transitions_to(done)

    @classmethod
    def check_read(cls, row: Any) -> State:
        SEEN[f"read {row.id}"] = type(row)
        return cls.write

    @classmethod
    def check_write(cls, row: Any) -> State:
        SEEN[f"write {row.id}"] = type(row)
        row.label = f"written by {row.id}"
        write_in_handler(row)
        return cls.done


class MixedTheOtherWay(StateGraph):
    read = State(plain_rows=True)
    write = State()
    done = State()
    read.transitions_to(write)
    write.transitions_to(done)
    check_read = Mixed.__dict__["check_read"]
    check_write = Mixed.__dict__["check_write"]


@pytest.mark.parametrize("graph", [Mixed, MixedTheOtherWay])
def test_a_state_overrides_the_graphs_plain_rows(
    backend, clock, make_stator, integration, graph
):
    model = item_model(integration, graph)
    stator = make_stator(backend, [model], clock)
    add(stator, model(id=1))
    SEEN.clear()
    stator.run_once()
    stator.run_once()
    assert issubclass(SEEN["read 1"], PlainRow)
    assert SEEN["write 1"] is model
    row = load(stator, model, 1)
    assert (row.state, row.label) == ("done", "written by 1")


# -- no transaction around a plain row's handler ----------------------------------------------


class OwnWrites(StateGraph):
    plain_rows = True
    new = State()
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, row: Any) -> State:
        alias = SEEN.get("alias")
        if alias is not None:
            SEEN["atomic"] = connections[alias].in_atomic_block
        return cls.done


def test_a_plain_rows_handler_runs_outside_any_transaction_of_the_engine(
    backend, clock, make_stator, integration
):
    """Django: no ``atomic`` block around it (its own writes commit on their own)."""
    model = item_model(integration, OwnWrites)
    stator = make_stator(backend, [model], clock)
    add(stator, model(id=1))
    SEEN.clear()
    SEEN["alias"] = alias_of(stator)
    assert stator.run_once().transitions == 1
    assert SEEN.get("atomic", False) is False


def test_a_worker_runs_plain_and_orm_states_side_by_side(
    backend, clock, make_stator, integration
):
    """Handler threads alternate between plain rows and ORM rows that write (Django keeps a
    thread's untouched atomic block from one ORM row to the next, and closes it before a
    plain row's handler)."""
    model = item_model(integration, Mixed)
    stator = make_stator(backend, [model], clock)
    for pk in range(1, 41):
        add(stator, model(id=pk))
    SEEN.clear()
    summary = stator.run(concurrency=2, until_idle=True, idle_window=0.2)
    assert summary.transitions == 80
    for pk in range(1, 41):
        row = load(stator, model, pk)
        assert (row.state, row.label) == ("done", f"written by {pk}")


class KeptBlock(StateGraph):
    orm_step = State()
    plain_step = State(plain_rows=True)
    done = State()
    orm_step.transitions_to(plain_step)
    plain_step.transitions_to(done)

    @classmethod
    def check_orm_step(cls, row: Any) -> State:
        return cls.plain_step  # touches nothing: a handler thread keeps its atomic block

    @classmethod
    def check_plain_step(cls, row: Any) -> State:
        SEEN["atomic"] = connections[SEEN["alias"]].in_atomic_block
        return cls.done


def test_a_plain_rows_handler_runs_outside_the_atomic_block_its_thread_kept(
    backend, clock, make_stator, integration
):
    """Django: a handler thread keeps an ORM row's untouched atomic block open for its next
    row; a plain row's handler must not run inside it (its own writes would then wait for a
    later row's commit, holding their locks)."""
    if not integration.startswith("django"):
        pytest.skip("only Django's handler threads keep a scope between rows")
    model = item_model(integration, KeptBlock)
    stator = make_stator(backend, [model], clock)
    add(stator, model(id=1), model(id=2, state="plain_step"))
    (tracked,) = stator.store.tracked
    executor = Executor(stator.store, clock)
    executor.scopes.keep_between_tasks()  # as a handler thread does
    SEEN.clear()
    SEEN["alias"] = alias_of(stator)
    claimed = stator.store.claim(tracked, clock.now(), 10)
    try:
        for obj, row in sorted(claimed, key=lambda pair: pair[1].state != "orm_step"):
            task = executor.prepare(tracked, obj, row)
            assert executor.before(task)
            executor.run_sync(task)
    finally:
        executor.scopes.settle()
    assert SEEN["atomic"] is False


def test_django_plain_rows_send_no_model_signals(backend, clock, make_stator, integration):
    """Django: an ORM row is built by ``from_db`` (``pre_init`` and ``post_init`` sent); a
    plain row by no model machinery at all."""
    if not integration.startswith("django"):
        pytest.skip("model signals are Django's")
    from django.db.models.signals import post_init, pre_init

    model = item_model(integration, Probe)
    stator = make_stator(backend, [model], clock)
    add(stator, model(id=1))
    sent: list[str] = []

    def note(signal_name: str) -> Any:
        return lambda sender, **kwargs: sent.append(signal_name)

    on_pre, on_post = note("pre_init"), note("post_init")
    pre_init.connect(on_pre, sender=model)
    post_init.connect(on_post, sender=model)
    try:
        stator.run_once()  # orm_step: an instance
        assert sent == ["pre_init", "post_init"]
        sent.clear()
        stator.run_once()  # plain_step: a plain row
        assert sent == []
    finally:
        pre_init.disconnect(on_pre, sender=model)
        post_init.disconnect(on_post, sender=model)
    assert load(stator, model, 1).state == "done"
