"""The write-back's batch travels as PostgreSQL array literals built by hand
(``_dialects.array_literal``): whatever a primary key or a state holds, the server must read
back exactly the values that were sent."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
from hypothesis import given
from hypothesis import strategies as st

from stator._store._dialects import array_literal

# PostgreSQL text cannot hold NUL; every other character must survive.
TEXT = st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=20)


def read_back(conn: psycopg.Connection[Any], values: list[Any], sqltype: str) -> list[Any]:
    row = conn.execute(f"SELECT CAST(%s AS {sqltype}[])", [array_literal(values)]).fetchone()
    assert row is not None
    return list(row[0])


@given(values=st.lists(st.none() | TEXT, min_size=1, max_size=8))
def test_text_comes_back_as_sent(pg_admin: psycopg.Connection[Any], values: list[Any]) -> None:
    assert read_back(pg_admin, values, "text") == values


@given(values=st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=8))
def test_bigints_come_back_as_sent(
    pg_admin: psycopg.Connection[Any], values: list[Any]
) -> None:
    assert read_back(pg_admin, values, "bigint") == values


@given(values=st.lists(st.none() | st.booleans(), min_size=1, max_size=8))
def test_booleans_come_back_as_sent(
    pg_admin: psycopg.Connection[Any], values: list[Any]
) -> None:
    assert read_back(pg_admin, values, "boolean") == values


def test_timestamps_in_the_engines_form_come_back_as_sent(
    pg_admin: psycopg.Connection[Any],
) -> None:
    when = datetime(2026, 11, 25, 13, 0, 1, 123456, tzinfo=UTC)
    assert read_back(pg_admin, [when.isoformat(), None], "timestamptz") == [when, None]


def test_a_batch_of_times_goes_in_binary_and_comes_back_to_the_microsecond(
    pg_admin: psycopg.Connection[Any],
) -> None:
    """The write's times travel as a binary ``timestamptz[]`` (``TimeArray``), not as text:
    the fence compares them for equality, so each must arrive to the microsecond."""
    from psycopg.adapt import PyFormat

    from stator._store._dialects._postgres import PostgresDialect, TimeArray, binary_times

    times = [datetime(2026, 11, 27, 21, 0, 0, 123457, tzinfo=UTC), None,
             datetime(1999, 1, 2, 3, 4, 5, 6, tzinfo=UTC)]
    sent = PostgresDialect().batch_times(times)
    assert type(sent) is TimeArray
    binary_times(pg_admin.adapters)
    dumper = psycopg.adapt.Transformer(pg_admin).get_dumper(sent, PyFormat.AUTO)
    assert dumper.format == psycopg.pq.Format.BINARY
    row = pg_admin.execute("SELECT CAST(%s AS timestamptz[])", [sent]).fetchone()
    assert row is not None and list(row[0]) == times
    # No time at all (every row moved to a terminal state): sent as the text it always was.
    nothing = PostgresDialect().batch_times([None, None])
    assert type(nothing) is not TimeArray
    row = pg_admin.execute("SELECT CAST(%s AS timestamptz[])", [nothing]).fetchone()
    assert row is not None and list(row[0]) == [None, None]
