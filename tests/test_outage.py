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
