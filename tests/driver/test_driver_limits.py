"""Concurrency limits in the claim (``State(max_running=…, limit_key=…)``): a claim never
takes more than a state's (or a key's) room, shares it round robin between keys, oldest due
first within a key, is not held up by a full key, and gets the room of an expired lease
back; on both drivers and databases."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from driver_rig import Rig

from stator import ConfigError, ManualClock, State, StateGraph
from stator._store.interface import Driver

LIMIT = 2


class Limited(StateGraph):
    """At most two rows of ``send`` running at once, across every worker."""

    send = State(timeout=10, max_running=LIMIT)
    sent = State()
    send.transitions_to(sent)

    @classmethod
    def check_send(cls, row: Any) -> State:
        return cls.sent


class PerDomain(StateGraph):
    """At most two rows of ``send`` running per ``domain``; ``other`` has no limit."""

    send = State(timeout=10, max_running=LIMIT, limit_key="domain")
    other = State(timeout=10)
    sent = State()
    send.transitions_to(other)
    other.transitions_to(sent)

    @classmethod
    def check_send(cls, row: Any) -> State:
        return cls.other

    @classmethod
    def check_other(cls, row: Any) -> State:
        return cls.sent


class PerQueue(StateGraph):
    """A limit for one key value (``mail``: one at a time); other values have none."""

    send = State(timeout=10, max_running={"mail": 1}, limit_key="domain")
    sent = State()
    send.transitions_to(sent)

    @classmethod
    def check_send(cls, row: Any) -> State:
        return cls.sent


LEASED = {"stator_lease_column": "leased_until"}


def limited_driver(rig: Rig, graph: type[StateGraph]) -> Driver:
    return rig.driver(rig.model(graph, times=("leased_until",), keys=("domain",),
                                hooks=LEASED))


def due_rows(rig: Rig, driver: Driver, clock: ManualClock, domains: str,
             state: str = "send") -> None:
    """One due row per letter of ``domains`` (its domain), the first the longest due."""
    now = clock.now()
    rig.insert(driver, *(
        {"id": pk, "state": state, "state_changed": now, "domain": domain,
         "state_next": now - timedelta(seconds=len(domains) - pk)}
        for pk, domain in enumerate(domains, 1)
    ))


def claim(driver: Driver, clock: ManualClock, limit: int = 100) -> list[Any]:
    return [c.pk for _obj, c in driver.claim(driver.tracked[0], clock.now(), limit)]


def test_a_claim_takes_no_more_than_the_states_room(rig: Rig, clock: ManualClock) -> None:
    driver = limited_driver(rig, Limited)
    due_rows(rig, driver, clock, "aaaaa")
    assert sorted(claim(driver, clock)) == [1, 2]  # the longest due first
    assert claim(driver, clock) == []  # both running: no room
    rig.update(driver, 1, state="sent", state_next=None)  # one finished
    assert claim(driver, clock) == [3]


def test_an_expired_lease_frees_its_room(rig: Rig, clock: ManualClock) -> None:
    driver = limited_driver(rig, Limited)
    due_rows(rig, driver, clock, "aaaa")
    assert sorted(claim(driver, clock)) == [1, 2]
    clock.advance(Limited.send.lease - 1)
    assert claim(driver, clock) == []
    clock.advance(1)  # the workers holding 1 and 2 are gone: their leases have run out
    assert sorted(claim(driver, clock)) == [3, 4]  # due longer than 1 and 2 (due again now)
    assert claim(driver, clock) == []


def test_a_row_moved_on_by_the_application_frees_its_room(rig: Rig, clock: ManualClock) -> None:
    """Running means: in the state, ``state_next`` still the lease the claim granted."""
    driver = limited_driver(rig, Limited)
    due_rows(rig, driver, clock, "aaaa")
    assert sorted(claim(driver, clock)) == [1, 2]
    rig.update(driver, 2, state_next=clock.now() + timedelta(hours=1))  # a retry, later
    assert claim(driver, clock) == [3]


def test_each_key_gets_its_own_room(rig: Rig, clock: ManualClock) -> None:
    driver = limited_driver(rig, PerDomain)
    due_rows(rig, driver, clock, "aaaaabccc")
    assert sorted(claim(driver, clock)) == [1, 2, 6, 7, 8]
    assert claim(driver, clock) == []


def test_keys_share_a_claim_round_robin_the_oldest_first_within_a_key(
    rig: Rig, clock: ManualClock
) -> None:
    driver = limited_driver(rig, PerDomain)
    due_rows(rig, driver, clock, "aaaaabbcc")
    assert sorted(claim(driver, clock, 3)) == [1, 6, 8]  # each key's first
    assert sorted(claim(driver, clock, 3)) == [2, 7, 9]  # each key's second


def test_a_full_key_does_not_hold_up_the_others(rig: Rig, clock: ManualClock) -> None:
    """The oldest rows all belong to a key at its limit: a small claim still gets work."""
    driver = limited_driver(rig, PerDomain)
    due_rows(rig, driver, clock, "a" * 50 + "bc")
    assert sorted(claim(driver, clock, 2)) == [1, 51]  # round robin: a's first, b's first
    assert sorted(claim(driver, clock, 2)) == [2, 52]  # a's second, c's first; a is full
    now = clock.now()
    rig.insert(driver, {"id": 60, "state": "send", "state_changed": now, "domain": "d",
                        "state_next": now})  # due after all of a's 48 waiting rows
    assert claim(driver, clock, 1) == [60]


def test_a_state_without_a_limit_is_claimed_as_always(rig: Rig, clock: ManualClock) -> None:
    driver = limited_driver(rig, PerDomain)
    due_rows(rig, driver, clock, "aaaaa", state="other")
    assert sorted(claim(driver, clock)) == [1, 2, 3, 4, 5]


def test_a_mapping_limits_the_values_it_lists(rig: Rig, clock: ManualClock) -> None:
    driver = limited_driver(rig, PerQueue)
    now = clock.now()
    rig.insert(driver, *(
        {"id": pk, "state": "send", "state_changed": now, "domain": d,
         "state_next": now - timedelta(seconds=10 - pk)}
        for pk, d in enumerate(["mail", "mail", "mail", "web", "web", "web"], 1)
    ))
    assert sorted(claim(driver, clock)) == [1, 4, 5, 6]


def test_concurrent_claims_never_overshoot(rig: Rig, clock: ManualClock) -> None:
    """Four claims at once, twenty times: never more than the limit running."""
    driver = limited_driver(rig, Limited)
    due_rows(rig, driver, clock, "a" * 200)
    for _round in range(20):
        got: list[Any] = []
        barrier = threading.Barrier(4)

        def take(barrier: threading.Barrier = barrier, got: list[Any] = got) -> None:
            try:
                barrier.wait()
                got.extend(claim(driver, clock, 1))
            finally:
                driver.thread_done()  # Django: this thread's connection is closed

        threads = [threading.Thread(target=take) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) <= LIMIT
        for pk in got:  # finished: room for the next round
            rig.update(driver, pk, state="sent", state_next=None)


def test_a_limit_needs_a_lease_column_and_a_not_null_key(rig: Rig) -> None:
    with pytest.raises(ConfigError, match="stator_lease_column"):
        rig.driver(rig.model(Limited), migrate=False)


def test_a_graph_without_limits_keeps_the_plain_claim(rig: Rig) -> None:
    from driver_rig import Flow

    driver = rig.driver(rig.model(Flow, times=("leased_until",), hooks=LEASED))
    sql = driver.tracked[0].sql
    assert sql.claim_lock is None and sql.claim is not None
    assert "stator_room" not in sql.claim and "RECURSIVE" not in sql.claim


def keyed_rows(rig: Rig, driver: Driver, clock: ManualClock, keys: list[str], each: int,
               first: int = 1) -> dict[int, str]:
    """``each`` due rows per key, the last key's the longest due; their keys by primary key."""
    now, rows, by_pk = clock.now(), [], {}
    for n, key in enumerate(keys):
        for j in range(each):
            pk = first + n * each + j
            by_pk[pk] = key
            rows.append({"id": pk, "state": "send", "state_changed": now, "domain": key,
                         "state_next": now - timedelta(seconds=len(keys) - n, milliseconds=-j)})
    rig.insert(driver, *rows)
    return by_pk


def test_a_claim_walks_a_window_of_keys_round_robin_and_reaches_every_key(
    rig: Rig, clock: ManualClock
) -> None:
    """More keys than a claim looks at (its batch): each claim takes the keys after the last
    one the previous claim served, wrapping round, so every key is served once before any is
    served again, the longest-due key included, whatever how long each has waited."""
    driver = limited_driver(rig, PerDomain)
    keys = [f"k{n:02}" for n in range(30)]
    by_pk = keyed_rows(rig, driver, clock, keys, 3)
    walk = keys * 2  # one each, in the walk's order, before any second; then round again
    for n in range(15):
        got = claim(driver, clock, 4)
        assert sorted(by_pk[pk] for pk in got) == sorted(walk[n * 4:n * 4 + 4])
        for pk in got:  # finished: the key has its room back
            rig.update(driver, pk, state="sent", state_next=None)


def test_full_keys_are_passed_by_without_filling_the_window(rig: Rig, clock: ManualClock) -> None:
    """Twenty keys at their limit between the cursor and the keys with room: a claim of two
    still gets two rows, from keys it reaches by walking past the full ones."""
    driver = limited_driver(rig, PerDomain)
    keyed_rows(rig, driver, clock, [f"k{n:02}" for n in range(20)], 3)
    assert len(claim(driver, clock)) == 40  # two of each: every key full
    by_pk = keyed_rows(rig, driver, clock, ["k05x", "k10x", "k15x"], 1, first=100)
    assert sorted(by_pk[pk] for pk in claim(driver, clock, 2)) == ["k05x", "k10x"]
    assert [by_pk[pk] for pk in claim(driver, clock, 2)] == ["k15x"]
    assert claim(driver, clock, 2) == []


def test_a_nullable_limit_key_is_refused_when_the_model_is_tracked(rig: Rig) -> None:
    """A NULL is no key: a limit per a nullable column is refused, naming the column."""
    with pytest.raises(ConfigError, match="limit_key='domain' must name a NOT NULL column"):
        rig.driver(rig.model(PerDomain, times=("leased_until",), texts=("domain",),
                             hooks=LEASED), migrate=False)
