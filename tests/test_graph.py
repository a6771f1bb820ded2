"""State graphs are data: their structure and every validation rule, without a database."""

import re

import pytest

from stator import GraphError, State, StateGraph


class Orders(StateGraph):
    new = State(retry_after=30)
    charged = State(timeout=10)
    shipped = State(externally_progressed=True)
    delivered = State()
    cancelled = State(delete_after=3600)

    new.transitions_to(charged)
    new.transitions_to(cancelled)
    new.times_out_to(cancelled, seconds=86400)
    charged.transitions_to(shipped)
    shipped.transitions_to(delivered)

    @classmethod
    def check_new(cls, order):
        return None

    @classmethod
    async def check_charged(cls, order):
        return cls.shipped


def raises_graph_error(*fragments: str):
    """Expect a GraphError whose message contains every fragment (the graph, the state...)."""
    pattern = "".join(f"(?=.*{re.escape(f)})" for f in fragments)
    return pytest.raises(GraphError, match=re.compile(pattern, re.DOTALL))


# -- structure -------------------------------------------------------------------------------


def test_children_are_exactly_the_declared_edges():
    assert Orders.new.children == {"charged": Orders.charged, "cancelled": Orders.cancelled}
    assert Orders.charged.children == {"shipped": Orders.shipped}
    assert Orders.shipped.children == {"delivered": Orders.delivered}
    assert Orders.delivered.children == {}
    assert Orders.cancelled.children == {}


def test_parents_are_exactly_the_states_with_an_edge_in():
    """A state is never its own parent: transitions_to once added the target to itself."""
    assert Orders.new.parents == {}
    assert Orders.charged.parents == {"new": Orders.new}
    assert Orders.shipped.parents == {"charged": Orders.charged}
    assert Orders.delivered.parents == {"shipped": Orders.shipped}
    assert Orders.cancelled.parents == {"new": Orders.new}


def test_repeated_edges_are_recorded_once():
    """times_out_to and fails_to add their edge; declaring it as well must not duplicate it."""
    assert list(Orders.new.children) == ["charged", "cancelled"]
    assert list(Orders.edges()) == [
        (Orders.new, Orders.charged),
        (Orders.new, Orders.cancelled),
        (Orders.charged, Orders.shipped),
        (Orders.shipped, Orders.delivered),
    ]


def test_initial_terminal_and_automatic_states():
    assert Orders.initial_state is Orders.new
    assert Orders.terminal_states == frozenset({Orders.delivered, Orders.cancelled})
    assert Orders.automatic_states == frozenset({Orders.new, Orders.charged})
    assert list(Orders.states) == ["new", "charged", "shipped", "delivered", "cancelled"]


def test_scheduled_states_include_deletion_and_timeouts():
    """The engine claims rows in states with a handler, a delete_after or a timed edge."""
    assert Orders.scheduled_states() == [Orders.new, Orders.charged, Orders.cancelled]


def test_states_know_their_name_graph_and_timings():
    assert Orders.charged.name == "charged"
    assert Orders.charged.graph is Orders
    assert Orders.charged.timeout == 10
    assert Orders.charged.lease == 20
    assert Orders.new.retry_after == 30
    assert Orders.new.timed_edge is not None
    assert Orders.new.timed_edge.target is Orders.cancelled
    assert Orders.new.timed_edge.seconds == 86400
    assert repr(Orders.new) == "<State Orders.new>"


def test_state_compares_equal_to_its_name():
    assert Orders.new == "new"
    assert "new" == Orders.new  # noqa: SIM300 - the reflected comparison is the point
    assert Orders.new != "charged"
    assert Orders.new != Orders.charged
    assert hash(Orders.new) == hash("new")
    assert Orders.new in {"new"}


def test_get_state_by_name_or_state():
    assert Orders.get_state("shipped") is Orders.shipped
    assert Orders.get_state(Orders.shipped) is Orders.shipped
    with raises_graph_error("Orders", "nope"):
        Orders.get_state("nope")


def test_sync_and_async_handlers_are_told_apart():
    assert Orders.new.handler is not None
    assert Orders.new.handler_is_async is False
    assert Orders.charged.handler_is_async is True
    assert Orders.shipped.handler is None


def test_handler_kinds_all_receive_the_row():
    """Classmethods, staticmethods and plain functions (given the graph) all work."""

    class Kinds(StateGraph):
        a = State()
        b = State()
        c = State()
        d = State()
        a.transitions_to(b)
        b.transitions_to(c)
        c.transitions_to(d)

        @classmethod
        def check_a(cls, row):
            return (cls, row)

        @staticmethod
        def check_b(row):
            return row

        def check_c(cls, row):  # a plain function is given the graph class
            return (cls, row)

    assert Kinds.a.handler("row") == (Kinds, "row")
    assert Kinds.b.handler("row") == "row"
    assert Kinds.c.handler("row") == (Kinds, "row")


# -- Takahē compatibility --------------------------------------------------------------------


def test_takahe_style_graph():
    """handle_<state>, try_interval and attempt_immediately=False port unchanged."""

    class Posts(StateGraph):
        new = State(try_interval=300, attempt_immediately=False)
        fanned_out = State(try_interval=30)
        done = State()
        new.transitions_to(fanned_out)
        fanned_out.transitions_to(done)

        @classmethod
        def handle_new(cls, instance):
            return cls.fanned_out

        @classmethod
        async def handle_fanned_out(cls, instance):
            return cls.done

    assert Posts.new.retry_after == 300
    assert Posts.new.start_after == 300
    assert Posts.fanned_out.retry_after == 30
    assert Posts.fanned_out.start_after == 0
    assert Posts.new.handler("post") is Posts.fanned_out
    assert Posts.fanned_out.handler_is_async is True


def test_attempt_immediately_true_starts_at_once():
    class G(StateGraph):
        a = State(externally_progressed=True, try_interval=10, attempt_immediately=True)
        b = State()
        a.transitions_to(b)

    assert G.a.start_after == 0


def test_handler_name_selects_the_handler():
    class G(StateGraph):
        a = State(handler_name="go")
        b = State()
        a.transitions_to(b)

        @classmethod
        def go(cls, row):
            return cls.b

    assert G.a.handler("row") is G.b


def test_force_initial_breaks_a_cycle():
    class Loop(StateGraph):
        a = State(externally_progressed=True, force_initial=True)
        b = State(externally_progressed=True)
        a.transitions_to(b)
        b.transitions_to(a)

    assert Loop.initial_state is Loop.a
    assert Loop.a.parents == {"b": Loop.b}
    assert Loop.b.parents == {"a": Loop.a}
    assert Loop.terminal_states == frozenset()


# -- validation ------------------------------------------------------------------------------


def test_no_states():
    with raises_graph_error("Empty", "at least one State"):

        class Empty(StateGraph):
            pass


def test_two_initial_candidates():
    with raises_graph_error("TwoDoors", "a, b"):

        class TwoDoors(StateGraph):
            a = State(externally_progressed=True)
            b = State(externally_progressed=True)
            c = State()
            a.transitions_to(c)
            b.transitions_to(c)


def test_two_forced_initial_states():
    with raises_graph_error("TwoForced", "force_initial", "a, b"):

        class TwoForced(StateGraph):
            a = State(externally_progressed=True, force_initial=True)
            b = State(externally_progressed=True, force_initial=True)
            a.transitions_to(b)
            b.transitions_to(a)


def test_cycle_without_force_initial():
    with raises_graph_error("Loop", "force_initial"):

        class Loop(StateGraph):
            a = State(externally_progressed=True)
            b = State(externally_progressed=True)
            a.transitions_to(b)
            b.transitions_to(a)


def test_unreachable_state():
    with raises_graph_error("Island", "c, d", "initial state a"):

        class Island(StateGraph):
            a = State(externally_progressed=True, force_initial=True)
            b = State()
            c = State(externally_progressed=True)
            d = State(externally_progressed=True)
            a.transitions_to(b)
            c.transitions_to(d)
            d.transitions_to(c)


def test_automatic_state_without_handler():
    with raises_graph_error("G.a", "no handler", "check_a", "externally_progressed"):

        class G(StateGraph):
            a = State()
            b = State()
            a.transitions_to(b)


def test_handler_on_terminal_state():
    with raises_graph_error("G.b", "terminal"):

        class G(StateGraph):
            a = State(externally_progressed=True)
            b = State()
            a.transitions_to(b)

            @classmethod
            def check_b(cls, row):
                return None


def test_handler_on_externally_progressed_state():
    with raises_graph_error("G.a", "externally_progressed"):

        class G(StateGraph):
            a = State(externally_progressed=True)
            b = State()
            a.transitions_to(b)

            @classmethod
            def check_a(cls, row):
                return None


def test_check_handler_for_a_missing_state():
    with raises_graph_error("G.check_x", "'x'"):

        class G(StateGraph):
            a = State(externally_progressed=True)
            b = State()
            a.transitions_to(b)

            @classmethod
            def check_x(cls, row):
                return None


def test_handle_handler_for_a_missing_state():
    with raises_graph_error("G.handle_x", "'x'"):

        class G(StateGraph):
            a = State(externally_progressed=True)
            b = State()
            a.transitions_to(b)

            @classmethod
            def handle_x(cls, row):
                return None


def test_two_handlers_for_one_state():
    with raises_graph_error("G.a", "check_a", "handle_a"):

        class G(StateGraph):
            a = State()
            b = State()
            a.transitions_to(b)

            @classmethod
            def check_a(cls, row):
                return None

            @classmethod
            def handle_a(cls, row):
                return None


def test_handler_name_that_does_not_exist():
    with raises_graph_error("G.a", "'go'"):

        class G(StateGraph):
            a = State(handler_name="go")
            b = State()
            a.transitions_to(b)


def test_handler_that_is_not_a_function():
    with raises_graph_error("G.check_a", "function"):

        class G(StateGraph):
            a = State()
            b = State()
            a.transitions_to(b)
            check_a = 42


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"retry_after": -1}, "retry_after must be > 0"),
        ({"retry_after": 0}, "retry_after must be > 0"),
        ({"try_interval": -5}, "retry_after must be > 0"),
        ({"start_after": -1}, "start_after must be >= 0"),
        ({"timeout": 0}, "timeout must be > 0"),
        ({"timeout": -3}, "timeout must be > 0"),
        ({"delete_after": 0}, "delete_after must be > 0"),
        ({"delete_after": -10}, "delete_after must be > 0"),
        ({"backoff": 0.5}, "backoff must be >= 1"),
        ({"retry_after": 100, "max_retry_after": 10}, "max_retry_after"),
        ({"retry_after": 10, "try_interval": 20}, "not both"),
    ],
)
def test_bad_timings(options, fragment):
    with raises_graph_error("G.a", fragment):

        class G(StateGraph):
            a = State(**options)
            b = State()
            a.transitions_to(b)

            @classmethod
            def check_a(cls, row):
                return None


def test_bad_timed_edge():
    with raises_graph_error("G.a", "times_out_to needs seconds > 0"):

        class G(StateGraph):
            a = State(externally_progressed=True)
            b = State()
            a.times_out_to(b, seconds=0)


def test_max_attempts_must_be_positive():
    with raises_graph_error("G.a", "max_attempts must be >= 1"):

        class G(StateGraph):
            a = State(max_attempts=0)
            b = State()
            a.fails_to(b)

            @classmethod
            def check_a(cls, row):
                return None


def test_max_attempts_without_fails_to():
    with raises_graph_error("G.a", "fails_to"):

        class G(StateGraph):
            a = State(max_attempts=3)
            b = State()
            a.transitions_to(b)

            @classmethod
            def check_a(cls, row):
                return None


def test_fails_to_without_max_attempts():
    with raises_graph_error("G.a", "max_attempts"):

        class G(StateGraph):
            a = State()
            b = State()
            a.fails_to(b)

            @classmethod
            def check_a(cls, row):
                return None


def test_max_attempts_on_a_state_without_handler():
    with raises_graph_error("G.a", "max_attempts only applies"):

        class G(StateGraph):
            a = State(externally_progressed=True, max_attempts=2)
            b = State()
            a.fails_to(b)


def test_same_state_object_twice():
    with raises_graph_error("G.b", "already named 'a'"):
        shared = State(externally_progressed=True)

        class G(StateGraph):
            a = shared
            b = shared


def test_state_object_shared_between_graphs():
    shared = State()

    class First(StateGraph):
        a = shared

    with raises_graph_error("Second.b", "already named 'a'"):

        class Second(StateGraph):
            b = shared


def test_edge_to_a_state_of_another_graph():
    with raises_graph_error("G.a", "not a state of G"):

        class G(StateGraph):
            a = State(externally_progressed=True)
            a.transitions_to(Orders.delivered)


def test_edge_to_something_that_is_not_a_state():
    with raises_graph_error("transitions_to", "'b'"):
        State().transitions_to("b")  # type: ignore[arg-type]


def _limited(**limits):
    class G(StateGraph):
        go = State(**limits)
        done = State()
        go.transitions_to(done)

        @classmethod
        def check_go(cls, row):
            return cls.done

    return G


def test_a_limit_is_kept_on_the_state():
    g = _limited(max_running=3, limit_key="domain")
    assert (g.go.max_running, g.go.limit_key, g.go.limited) == (3, "domain", True)
    assert not g.done.limited
    per_value = _limited(max_running={"mail": 5}, limit_key="queue_name").go
    assert per_value.max_running == {"mail": 5}


@pytest.mark.parametrize(("limits", "message"), [
    ({"max_running": 0}, "max_running must be an int >= 1"),
    ({"max_running": True}, "max_running must be an int >= 1"),
    ({"max_running": 1.5}, "max_running must be an int >= 1"),
    ({"limit_key": "domain"}, "limit_key needs max_running"),
    ({"max_running": {"mail": 2}}, "needs limit_key"),
    ({"max_running": {}, "limit_key": "q"}, "at least one key value"),
    ({"max_running": {"mail": 0}, "limit_key": "q"}, "max_running must be an int >= 1"),
    ({"max_running": 2, "limit_key": "a domain"}, "limit_key must be a column name"),
])
def test_a_wrong_limit_fails_at_class_creation(limits, message):
    with pytest.raises(GraphError, match=re.escape(message)):
        _limited(**limits)


def test_a_limit_on_a_state_without_a_handler_is_refused():
    with pytest.raises(GraphError, match="only applies to a state with a handler"):
        class G(StateGraph):
            waiting = State(externally_progressed=True, max_running=2)
            done = State()
            waiting.transitions_to(done)


# -- plain rows ------------------------------------------------------------------------------


def _plain(graph_value: object = None, **state: object) -> type[StateGraph]:
    """A two-handler graph: ``go`` declared with ``state``, ``more`` left to the graph."""
    body: dict[str, object] = {}
    if graph_value is not None:
        body["plain_rows"] = graph_value
    go, more, done = State(**state), State(), State()  # type: ignore[arg-type]
    go.transitions_to(more)
    more.transitions_to(done)
    body.update(go=go, more=more, done=done,
                check_go=classmethod(lambda cls, row: cls.more),
                check_more=classmethod(lambda cls, row: cls.done))
    return type("Plain", (StateGraph,), body)


def test_plain_rows_are_off_unless_declared():
    g = _plain()
    assert not g.go.plain_rows and not g.more.plain_rows and not g.done.plain_rows


def test_a_graphs_plain_rows_reach_every_handler_and_a_state_overrides_it_both_ways():
    g = _plain(True, plain_rows=False)
    assert (g.go.plain_rows, g.more.plain_rows) == (False, True)
    assert not g.done.plain_rows  # no handler: nothing gets rows
    g = _plain(False, plain_rows=True)
    assert (g.go.plain_rows, g.more.plain_rows) == (True, False)


@pytest.mark.parametrize("value", ["yes", 1, 0, None.__class__])
def test_a_plain_rows_that_is_not_a_bool_fails_at_class_creation(value):
    with raises_graph_error("Plain.go", "plain_rows must be True or False", repr(value)):
        _plain(plain_rows=value)
    with raises_graph_error("Plain:", "plain_rows must be True or False", repr(value)):
        _plain(value)


def test_plain_rows_on_a_state_without_a_handler_is_refused():
    with raises_graph_error("G.waiting", "plain_rows only applies to a state with a handler"):
        class G(StateGraph):
            waiting = State(externally_progressed=True, plain_rows=True)
            done = State()
            waiting.transitions_to(done)
    class Fine(StateGraph):  # False says nothing to refuse
        waiting = State(externally_progressed=True, plain_rows=False)
        done = State()
        waiting.transitions_to(done)
    assert not Fine.waiting.plain_rows
