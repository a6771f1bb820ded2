"""The timing rules, as pure functions: claimed row + outcome + now -> the row's next columns."""

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stator import State, StateGraph
from stator._policy import (
    JITTER,
    Claimed,
    Failed,
    Moved,
    Stayed,
    after_run,
    backoff_delay,
    before_run,
    check_target,
    first_due,
    release,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)


class Jobs(StateGraph):
    queued = State(retry_after=10, backoff=2, max_retry_after=100, start_after=5)
    running = State(retry_after=100, max_attempts=3)
    waiting = State(externally_progressed=True)
    stale = State(externally_progressed=True)
    failed = State(delete_after=1000)
    done = State()

    queued.transitions_to(running)
    queued.times_out_to(stale, seconds=250)
    running.transitions_to(done)
    running.transitions_to(waiting)
    running.fails_to(failed)
    waiting.times_out_to(stale, seconds=50)
    waiting.transitions_to(done)
    stale.transitions_to(done)

    @classmethod
    def check_queued(cls, job):
        return None

    @classmethod
    def check_running(cls, job):
        return None


class Other(StateGraph):
    start = State(externally_progressed=True)
    done = State()
    start.transitions_to(done)


def claimed(state: str, *, entered: datetime = T0, attempts: int = 0, pk: object = 7) -> Claimed:
    return Claimed(
        pk=pk, state=state, state_changed=entered, lease_until=entered + seconds(600),
        attempts=attempts,
    )


BOOM = Failed("error", "RuntimeError: boom", "Traceback...")


# -- after_run ---------------------------------------------------------------------------------


def test_moved_enters_the_target_and_is_fenced_by_the_claim():
    row = claimed("queued", attempts=2)
    now = T0 + seconds(30)
    write = after_run(Jobs, row, Moved(Jobs.running), now)
    assert (write.pk, write.fence_state, write.fence) == (7, "queued", row.lease_until)
    assert write.moved and not write.delete
    assert write.state == "running"
    assert write.state_changed == now
    assert write.state_next == now  # running has a handler and no start_after
    assert write.attempts == 0
    assert write.failure is None


def test_moved_into_a_state_the_engine_never_needs_again():
    write = after_run(Jobs, claimed("running"), Moved(Jobs.done), T0)
    assert write.state == "done"
    assert write.state_next is None


def test_moved_into_a_state_with_start_after_or_deadlines():
    now = T0 + seconds(1)
    assert first_due(Jobs.queued, now) == now + seconds(5)
    assert first_due(Jobs.waiting, now) == now + seconds(50)  # its timeout
    assert first_due(Jobs.failed, now) == now + seconds(1000)  # its deletion
    assert after_run(Jobs, claimed("running"), Moved(Jobs.waiting), now).state_next == (
        now + seconds(50)
    )


def test_stayed_retries_after_retry_after_without_penalty():
    """"Not yet" neither counts a failure nor forgets earlier ones (max_attempts still bites)."""
    row = claimed("running", attempts=2)
    now = T0 + seconds(1)
    write = after_run(Jobs, row, Stayed(), now)
    assert write.state == "running" and not write.moved
    assert write.state_changed == T0  # still the time it entered the state
    assert write.state_next == now + seconds(100)  # plain retry_after, no backoff
    assert write.attempts == 2
    assert write.failure is None


def test_stayed_with_a_delay_overrides_retry_after():
    now = T0 + seconds(1)
    assert after_run(Jobs, claimed("running"), Stayed(3.5), now).state_next == now + seconds(3.5)
    assert after_run(Jobs, claimed("running"), Stayed(0), now).state_next == now


def test_failure_counts_an_attempt_and_backs_off():
    row = claimed("queued", attempts=1)
    now = T0 + seconds(1)
    write = after_run(Jobs, row, BOOM, now)
    assert write.state == "queued" and not write.moved
    assert write.attempts == 2
    assert write.attempt == 2
    assert write.failure == BOOM
    assert write.state_next == now + seconds(backoff_delay(Jobs.queued, 2, 7))
    assert 18 <= (write.state_next - now).total_seconds() <= 22


def test_exhausted_attempts_move_to_the_fails_to_target():
    now = T0 + seconds(1)
    second = after_run(Jobs, claimed("running", attempts=1), BOOM, now)
    assert second.state == "running" and second.attempts == 2
    third = after_run(Jobs, claimed("running", attempts=2), BOOM, now)
    assert third.state == "failed" and third.moved
    assert third.attempts == 0
    assert third.failure == BOOM
    assert third.attempt == 3
    assert third.state_next == now + seconds(1000)


def test_retry_is_capped_by_a_pending_timeout():
    """A row that keeps retrying must not sleep past the moment it should time out."""
    row = claimed("queued")
    now = T0 + seconds(200)
    assert after_run(Jobs, row, Stayed(), now).state_next == now + seconds(10)
    assert after_run(Jobs, row, Stayed(500), now).state_next == T0 + seconds(250)
    late_failure = after_run(Jobs, claimed("queued", attempts=9), BOOM, now)
    assert late_failure.state_next == T0 + seconds(250)


# -- backoff -----------------------------------------------------------------------------------


def test_backoff_grows_exponentially_then_caps():
    delays = [backoff_delay(Jobs.queued, n, "row") for n in range(1, 9)]
    expected = [10, 20, 40, 80, 100, 100, 100, 100]
    for delay, base in zip(delays, expected, strict=True):
        assert base * (1 - JITTER) <= delay <= base * (1 + JITTER)


def test_jitter_differs_between_rows():
    """Rows that failed together should not all retry at the same instant."""
    delays = {backoff_delay(Jobs.queued, 1, pk) for pk in range(50)}
    assert len(delays) > 40


@given(
    retry_after=st.floats(min_value=0.01, max_value=10_000),
    backoff=st.floats(min_value=1, max_value=10),
    extra_cap=st.floats(min_value=0, max_value=100_000),
    failures=st.integers(min_value=1, max_value=60),
    key=st.one_of(st.integers(), st.text(max_size=20)),
)
def test_backoff_stays_in_the_jitter_band(retry_after, backoff, extra_cap, failures, key):
    state = State(retry_after=retry_after, backoff=backoff, max_retry_after=retry_after + extra_cap)
    base = min(retry_after * backoff ** (failures - 1), retry_after + extra_cap)
    delay = backoff_delay(state, failures, key)
    assert base * (1 - JITTER) * (1 - 1e-9) <= delay <= base * (1 + JITTER) * (1 + 1e-9)
    assert backoff_delay(state, failures, key) == delay


# -- before_run --------------------------------------------------------------------------------


def test_before_run_lets_the_handler_run_when_nothing_is_due():
    assert before_run(Jobs, claimed("queued"), T0 + seconds(249)) is None


def test_before_run_times_out():
    now = T0 + seconds(250)
    write = before_run(Jobs, claimed("queued"), now)
    assert write is not None and write.moved
    assert write.state == "stale"
    assert write.state_changed == now


def test_before_run_deletes_only_once_the_delay_is_over():
    early = before_run(Jobs, claimed("failed"), T0 + seconds(999))
    assert early is not None and not early.delete
    assert early.state == "failed"
    assert early.state_next == T0 + seconds(1000)  # back on its schedule, unchanged
    late = before_run(Jobs, claimed("failed"), T0 + seconds(1000))
    assert late is not None and late.delete
    assert (late.pk, late.fence_state, late.fence) == (7, "failed", T0 + seconds(600))


def test_before_run_reschedules_an_early_timeout_claim():
    write = before_run(Jobs, claimed("waiting", attempts=1), T0 + seconds(10))
    assert write is not None and not write.moved
    assert write.state == "waiting"
    assert write.state_next == T0 + seconds(50)
    assert write.attempts == 1


# -- release -----------------------------------------------------------------------------------


def test_release_makes_the_row_due_now_and_keeps_its_attempts():
    row = claimed("running", attempts=2)
    now = T0 + seconds(3)
    write = release(row, now)
    assert write.state_next == now
    assert write.state == "running" and write.state_changed == T0
    assert write.attempts == 2
    assert not write.moved and write.failure is None
    assert write.fence == row.lease_until


# -- check_target ------------------------------------------------------------------------------


def test_check_target_accepts_a_child_state_or_its_name():
    assert check_target(Jobs, "running", Jobs.done) is Jobs.done
    assert check_target(Jobs, "running", "waiting") is Jobs.waiting


@pytest.mark.parametrize(
    ("returned", "fragment"),
    [
        (Jobs.queued, "may only move to done, waiting, failed"),
        ("stale", "may only move to done, waiting, failed"),
        ("nonsense", "'nonsense'"),
        (42, "expected a State"),
        (True, "expected a State"),
        (["done"], "expected a State"),
        (Other.done, "a state of Other"),
    ],
)
def test_check_target_rejects_undeclared_targets_and_garbage(returned, fragment):
    problem = check_target(Jobs, "running", returned)
    assert isinstance(problem, str)
    assert fragment in problem


def test_a_terminal_state_may_move_nowhere():
    problem = check_target(Jobs, "done", "running")
    assert isinstance(problem, str)
    assert "may only move to nothing" in problem


def test_a_decided_failure_is_recorded_but_follows_the_handlers_decision() -> None:
    """The task backend's failures: logged and counted as failures (``write.failure``), with
    the handler's own attempt number, but the stay or move is the handler's, and the
    engine's failure count (which ``max_attempts`` counts) is left as it was."""
    row = Claimed(pk=7, state="running", state_changed=T0, lease_until=T0 + seconds(60),
                  attempts=2)
    failed = Failed("error", "ValueError: no stock", "Traceback ...")
    stay = after_run(Jobs, row, dataclasses.replace(failed, then=Stayed(5), attempt=4), T0)
    assert (stay.state, stay.state_next, stay.attempts) == ("running", T0 + seconds(5), 2)
    assert stay.failure is not None and stay.attempt == 4 and stay.failed_at == T0
    move = after_run(Jobs, row, dataclasses.replace(failed, then=Moved(Jobs.done), attempt=5),
                     T0)
    assert (move.state, move.moved, move.attempt) == ("done", True, 5)
    assert move.failure is not None
    # Without a decision, the third failure is the state's last (max_attempts=3).
    assert after_run(Jobs, row, failed, T0).state == "failed"
