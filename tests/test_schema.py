"""Migrating and checking the database: Stator's own tables and the tracked tables' columns."""

from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from stator import ConfigError, SchemaError, State, StateGraph, Stator, SystemClock
from stator._store._schema import SCHEMA_VERSION


class Orders(StateGraph):
    new = State()
    done = State()
    new.transitions_to(done)

    @classmethod
    def check_new(cls, order):
        return cls.done


@pytest.fixture
def unmigrated(backend, clock, build_models):
    """``unmigrated(table=...)``: a Stator over a fresh ``Order`` model, not yet migrated."""
    made = []

    def make(graph=Orders, time=clock, **options):
        stator = Stator(backend, [build_models(graph, **options).Order], clock=time)
        made.append(stator)
        return stator

    yield make
    for stator in made:
        stator.dispose()


def execute(stator, *statements):
    with stator.engine.begin() as conn:
        for statement in statements:
            conn.execute(text(statement))


def test_migrate_creates_everything_once_and_says_what_it_did(unmigrated):
    stator = unmigrated()
    done = stator.migrate()
    upgraded = f"stator schema upgraded to version {SCHEMA_VERSION}"
    assert done[:2] == [upgraded, "created table orders"]
    if stator.engine.dialect.name == "postgresql":
        assert done[2:] == ["installed wake-up trigger on orders"]
    else:
        assert done[2:] == []
    stator.check()
    assert stator.migrate() == []
    stator.check()


def test_check_without_stator_tables(unmigrated):
    stator = unmigrated()
    with stator.engine.connect():
        pass  # the database exists (on SQLite: the file), without Stator's tables
    with pytest.raises(SchemaError, match=r"no Stator tables.*stator migrate"):
        stator.check()


def test_check_with_a_missing_tracked_table(unmigrated, backend, clock, build_models):
    unmigrated(table="others").migrate()
    with pytest.raises(SchemaError, match=r"table orders does not exist.*stator migrate"):
        unmigrated().check()


def test_check_with_a_table_that_lacks_the_stator_columns(unmigrated):
    unmigrated(table="others").migrate()
    stator = unmigrated()
    execute(stator, "CREATE TABLE orders (id INTEGER PRIMARY KEY, note VARCHAR(100))")
    with pytest.raises(
        SchemaError,
        match=r"table orders lacks Stator column.*state, state_changed, state_next, "
        r"state_attempts.*stator migrate",
    ):
        stator.check()


def test_migrate_adds_the_stator_columns_to_an_existing_table(unmigrated):
    """Rows that were there before Stator enter the initial state and are due at once."""
    stator = unmigrated()
    execute(
        stator,
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, note VARCHAR(100))",
        "INSERT INTO orders (id, note) VALUES (1, 'old'), (2, 'older')",
    )
    done = stator.migrate()
    assert [f"added column orders.{c}" for c in ("state", "state_changed")] == done[1:3]
    assert "added column orders.state_next" in done
    assert "added column orders.state_attempts" in done
    assert "created index ix_orders_stator_due" in done
    stator.check()

    with Session(stator.engine) as session:
        rows = session.execute(text("SELECT state, state_attempts FROM orders")).all()
    assert sorted(rows) == [("new", 0), ("new", 0)]
    assert stator.run_once().transitions == 2
    assert stator.migrate() == []


def test_rows_inserted_after_adding_columns_are_scheduled_from_their_insert(unmigrated):
    """Defaults added by migrate must not freeze the migration time into later rows."""

    class Slow(StateGraph):
        new = State(start_after=600)
        done = State()
        new.transitions_to(done)

        @classmethod
        def check_new(cls, order):
            return cls.done

    stator = unmigrated(Slow, time=SystemClock())  # the database's own time, as its defaults
    execute(stator, "CREATE TABLE orders (id INTEGER PRIMARY KEY, note VARCHAR(100))")
    execute(stator, "INSERT INTO orders (id) VALUES (1)")
    stator.migrate()
    execute(stator, "INSERT INTO orders (id) VALUES (2)")
    with Session(stator.engine) as session:
        existing = session.get(stator.models[0], 1)
        added = session.get(stator.models[0], 2)
        # Rows that predate the migration are treated as inserted at migration time; later
        # rows as inserted when they were.  Both follow the graph (start_after=600).
        assert existing.state_next - existing.state_changed == timedelta(seconds=600)
        assert added.state_next - added.state_changed == timedelta(seconds=600)
        assert added.state_changed >= existing.state_changed


def test_an_older_schema_version_is_upgraded(unmigrated):
    stator = unmigrated()
    stator.migrate()
    execute(stator, "UPDATE stator_schema SET version = 0")
    with pytest.raises(SchemaError, match=r"version 0.*stator migrate"):
        stator.check()
    assert stator.migrate() == [f"stator schema upgraded to version {SCHEMA_VERSION}"]
    stator.check()


def test_a_newer_schema_version_is_refused(unmigrated):
    """An old package must not run against a schema it does not understand."""
    stator = unmigrated()
    stator.migrate()
    execute(stator, "UPDATE stator_schema SET version = 99")
    with pytest.raises(SchemaError, match=r"version 99.*upgrade the stator-engine package"):
        stator.check()
    with pytest.raises(SchemaError, match="upgrade the stator-engine package"):
        stator.migrate()
    with pytest.raises(SchemaError, match="upgrade the stator-engine package"):
        stator.status()


# -- configuration -----------------------------------------------------------------------------


@pytest.fixture
def order_model(build_models):
    return build_models(Orders).Order


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("nonsense://x", "supports sqlite:// and postgresql://"),
        ("mysql://user@localhost/app", "supports sqlite:// and postgresql://"),
        ("not a url at all", "not a database URL"),
    ],
)
def test_unusable_urls_are_config_errors(order_model, url, fragment):
    with pytest.raises(ConfigError, match=fragment):
        Stator(url, [order_model])


def test_models_must_use_the_mixin(order_model, build_models):
    with pytest.raises(ConfigError, match="at least one model"):
        Stator("sqlite://", [])
    with pytest.raises(ConfigError, match="StatorMixin"):
        Stator("sqlite://", [build_models(Orders).Line])


@pytest.mark.parametrize("option", [{"concurrency": 0}, {"batch_size": 0}])
def test_bad_options_are_config_errors(order_model, option):
    with pytest.raises(ConfigError, match="at least 1"):
        Stator("sqlite://", [order_model], **option)


def test_rows_that_predate_the_columns_enter_at_the_clocks_time(unmigrated, clock):
    """The migration's "now" is the injected clock's (where the database takes it as a
    constant; SQLite's added columns get the database's time from a trigger instead)."""
    stator = unmigrated()
    if stator.store.dialect.constant_added_defaults:
        pytest.skip("SQLite dates the existing rows itself (see _sqlite_time_defaults)")
    execute(stator, "CREATE TABLE orders (id INTEGER PRIMARY KEY, note VARCHAR(100))",
            "INSERT INTO orders (id) VALUES (1)")
    clock.advance(3600)
    stator.migrate()
    with Session(stator.engine) as session:
        existing = session.get(stator.models[0], 1)
        assert (existing.state_changed, existing.state_next) == (clock.now(), clock.now())
