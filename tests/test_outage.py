"""An outage is logged when it starts and when it ends, never once per retry."""

import logging

from sqlalchemy.exc import IntegrityError, OperationalError

from stator._outage import Outage, is_transient


def lost_connection() -> OperationalError:
    return OperationalError("SELECT 1", {}, Exception("server closed the connection"))


def test_an_outage_logs_twice_whatever_its_length(caplog):
    outage = Outage("writer", first_delay=0.25, max_delay=30.0)
    with caplog.at_level(logging.INFO, logger="stator.worker"):
        delays = [outage.failed(lost_connection()) for _ in range(12)]
        outage.recovered()
        outage.recovered()  # nothing to report when nothing failed
    assert delays[:4] == [0.25, 0.5, 1.0, 2.0]
    assert delays[-1] == 30.0 and max(delays) == 30.0
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["writer", "writer"]
    assert "after 12 failed attempt(s)" in caplog.records[-1].getMessage()


def test_only_connection_trouble_is_retried():
    assert is_transient(lost_connection())
    assert not is_transient(IntegrityError("INSERT", {}, Exception("duplicate key")))


def test_a_long_outage_can_be_reminded_of_once_a_minute(caplog):
    now = [0.0]
    outage = Outage("stator run", remind_every=60.0, monotonic=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="stator.worker"):
        for _ in range(300):  # five minutes of retries a second apart
            outage.failed(lost_connection())
            now[0] += 1.0
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 5  # the start, then one a minute
    assert "still unavailable after 60s" in lines[1]


def test_every_retry_loop_backs_off_by_the_same_rule():
    from stator import _backoff
    from stator._launcher._machine import Backoff

    assert [_backoff.delay(n, 0.25, 30.0) for n in (1, 2, 3, 4, 9, 100)] == [
        0.25, 0.5, 1.0, 2.0, 30.0, 30.0]
    assert _backoff.delay(1, 5.0, 1.0) == 5.0  # a cap below the first wait: the first wait
    assert [Backoff(floor=5, cap=30).delay(n) for n in (1, 2, 3, 4, 5)] == [5, 10, 20, 30, 30]
