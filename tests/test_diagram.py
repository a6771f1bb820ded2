"""Diagrams: every state and edge drawn, the engine's own edges labelled with when they fire.

The syntax checks here are structural (each line is one of the statement forms we emit, ids
resolve, braces balance) so they run anywhere; if Graphviz is installed the dot output is
also fed to ``dot`` itself.
"""

import re
import shutil
import subprocess

import pytest

from stator import State, StateGraph
from stator._graph_text import format_seconds, state_notes, to_dot, to_mermaid


class Ticket(StateGraph):
    new = State(retry_after=30, timeout=10)
    waiting = State(externally_progressed=True)
    escalated = State(retry_after=300, backoff=3, max_retry_after=7200, max_attempts=3)
    closed = State(delete_after=86400)
    failed = State()

    new.transitions_to(waiting)
    new.times_out_to(closed, seconds=7 * 86400)
    waiting.transitions_to(escalated)
    escalated.transitions_to(closed)
    escalated.fails_to(failed)

    @classmethod
    def check_new(cls, row: object) -> None:
        return None

    @classmethod
    def check_escalated(cls, row: object) -> None:
        return None


class Ping(StateGraph):
    sent = State(retry_after=5, start_after=60)
    answered = State()

    sent.transitions_to(answered)

    @classmethod
    def check_sent(cls, row: object) -> None:
        return None


EDGES = [
    ("new", "waiting"), ("new", "closed"), ("waiting", "escalated"),
    ("escalated", "closed"), ("escalated", "failed"),
]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"), (0.25, "250ms"), (1, "1s"), (45, "45s"), (90, "1m30s"), (300, "5m"),
        (7200, "2h"), (5400, "1h30m"), (86400, "1d"), (7 * 86400, "7d"), (1.5, "1.5s"),
        (93784, "1d2h3m4s"),
    ],
)
def test_format_seconds(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


def test_state_notes_list_only_what_differs_from_defaults() -> None:
    assert state_notes(Ticket.new) == ["retry 30s", "deadline 10s"]
    assert state_notes(Ticket.waiting) == ["externally progressed"]
    assert state_notes(Ticket.escalated) == ["retry 5m x3 up to 2h"]
    assert state_notes(Ticket.closed) == ["delete after 1d"]
    assert state_notes(Ticket.failed) == []
    assert state_notes(Ping.sent) == ["retry 5s", "start after 1m"]


# -- Mermaid -------------------------------------------------------------------------------

MERMAID_LINE = re.compile(
    r"""^(?:
        stateDiagram-v2
      | direction\ LR
      | %%\ .*
      | state\ "[^"]+"\ as\ (?P<decl>\w+)
      | (?P<noted>\w+)\ :\ [^;"{}]+
      | (?P<src>\w+|\[\*\])\ -->\ (?P<dst>\w+|\[\*\])(?:\ :\ [^;"{}]+)?
      | state\ \w+\ \{
      | \}
    )$""",
    re.VERBOSE,
)


def _mermaid_statements(text: str) -> list[re.Match[str]]:
    matches = []
    for line in text.splitlines():
        match = MERMAID_LINE.match(line.strip())
        assert match, f"not a statement we emit: {line!r}"
        matches.append(match)
    return matches


def test_mermaid_is_well_formed() -> None:
    for text in (to_mermaid([Ticket]), to_mermaid([Ticket, Ping])):
        assert text.startswith("stateDiagram-v2\n")
        statements = _mermaid_statements(text)
        declared = {m["decl"] for m in statements if m["decl"]}
        used = {m[g] for m in statements for g in ("noted", "src", "dst") if m[g]}
        assert used - {"[*]"} <= declared  # no edge to an undeclared (misspelt) state
        assert text.count("{") == text.count("}")


def test_mermaid_draws_every_state_and_edge() -> None:
    text = to_mermaid([Ticket])
    for name in Ticket.states:
        assert f'state "{name}" as Ticket__{name}' in text
    arrows = re.findall(r"^\s*Ticket__(\w+) --> Ticket__(\w+)", text, re.MULTILINE)
    assert sorted(arrows) == sorted(EDGES)


def test_mermaid_marks_initial_terminal_and_external_states() -> None:
    text = to_mermaid([Ticket])
    assert re.findall(r"\[\*\] --> (\w+)", text) == ["Ticket__new"]
    assert sorted(re.findall(r"(\w+) --> \[\*\]", text)) == ["Ticket__closed", "Ticket__failed"]
    assert "Ticket__waiting : externally progressed" in text


def test_mermaid_labels_timed_and_exhausted_edges() -> None:
    text = to_mermaid([Ticket])
    assert "Ticket__new --> Ticket__closed : after 7d" in text
    assert "Ticket__escalated --> Ticket__failed : after 3 failures" in text
    assert "Ticket__new --> Ticket__waiting\n" in text  # a handler's edge has no label
    assert "Ticket__new : retry 30s" in text
    assert "Ticket__new : deadline 10s" in text
    assert "Ticket__closed : delete after 1d" in text


def test_mermaid_gives_each_graph_its_own_scope() -> None:
    text = to_mermaid([Ticket, Ping])
    assert "state Ticket {" in text and "state Ping {" in text
    assert text.count("[*] --> ") == 2
    assert "Ping__sent : start after 1m" in text


def test_graphs_with_the_same_name_do_not_share_ids() -> None:
    text = to_mermaid([Ping, Ping])
    assert "state Ping {" in text and "state Ping_2 {" in text
    assert "Ping_2__sent --> Ping_2__answered" in text


# -- Graphviz dot ----------------------------------------------------------------------------

DOT_NODE = re.compile(r'^\s*"([^"]+)" \[(.*)\];$', re.MULTILINE)
DOT_EDGE = re.compile(r'^\s*"([^"]+)" -> "([^"]+)"(?: \[(.*)\])?;$', re.MULTILINE)


def test_dot_draws_every_state_and_edge() -> None:
    text = to_dot([Ticket])
    nodes = {name: attrs for name, attrs in DOT_NODE.findall(text)}
    assert set(nodes) == {f"Ticket.{name}" for name in Ticket.states} | {"Ticket.__start__"}
    edges = [(a, b) for a, b, _ in DOT_EDGE.findall(text)]
    expected = [(f"Ticket.{a}", f"Ticket.{b}") for a, b in EDGES]
    assert sorted(edges) == sorted([*expected, ("Ticket.__start__", "Ticket.new")])
    assert text.startswith("digraph stator {") and text.count("{") == text.count("}")


def test_dot_marks_initial_terminal_and_external_states() -> None:
    text = to_dot([Ticket])
    nodes = dict(DOT_NODE.findall(text))
    assert "shape=point" in nodes["Ticket.__start__"]
    terminal = {name for name, attrs in nodes.items() if 'peripheries="2"' in attrs}
    assert terminal == {"Ticket.closed", "Ticket.failed"}
    assert 'style="rounded,dashed"' in nodes["Ticket.waiting"]
    assert nodes["Ticket.new"].startswith('label="new\\nretry 30s\\ndeadline 10s"')


def test_dot_labels_timed_and_exhausted_edges() -> None:
    edges = {(a, b): attrs for a, b, attrs in DOT_EDGE.findall(to_dot([Ticket]))}
    assert 'label="after 7d"' in edges[("Ticket.new", "Ticket.closed")]
    assert 'style="dashed"' in edges[("Ticket.new", "Ticket.closed")]
    assert 'label="after 3 failures"' in edges[("Ticket.escalated", "Ticket.failed")]
    assert edges[("Ticket.new", "Ticket.waiting")] == ""


def test_dot_has_one_cluster_per_graph() -> None:
    text = to_dot([Ticket, Ping])
    assert 'subgraph "cluster_Ticket" {' in text
    assert 'subgraph "cluster_Ping" {' in text


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
def test_graphviz_accepts_the_dot_output() -> None:
    result = subprocess.run(
        ["dot", "-Tsvg"], input=to_dot([Ticket, Ping]), capture_output=True, text=True,
        check=False, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "<svg" in result.stdout


class Payment(StateGraph):
    """Both a handler's edge and the engine's timeout lead from pending to cancelled."""

    pending = State(max_attempts=2)
    cancelled = State()

    pending.transitions_to(cancelled)
    pending.times_out_to(cancelled, seconds=3600)
    pending.fails_to(cancelled)

    @classmethod
    def check_pending(cls, row: object) -> None:
        return None


def test_mermaid_draws_each_way_between_the_same_states() -> None:
    text = to_mermaid([Payment])
    edges = re.findall(r"^\s*Payment__pending --> Payment__cancelled(.*)$", text, re.MULTILINE)
    assert sorted(edges) == sorted(["", " : after 1h", " : after 2 failures"])


def test_dot_draws_each_way_between_the_same_states() -> None:
    text = to_dot([Payment])
    edges = re.findall(r'"Payment.pending" -> "Payment.cancelled"(.*);', text)
    assert len(edges) == 3
    assert sum("dashed" in e and "after 1h" in e for e in edges) == 1
    assert sum("firebrick" in e and "after 2 failures" in e for e in edges) == 1
    assert sum(e == "" for e in edges) == 1
