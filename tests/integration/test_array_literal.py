"""The array literals the submission's answers are sent as (services/persistence/records.py), read
back by the real PostgreSQL exactly as given."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from services.persistence.records import array_literal

AWARE = st.datetimes(
    min_value=datetime(1970, 1, 2),
    max_value=datetime(2200, 1, 1),
    timezones=st.sampled_from(
        [UTC, timezone(timedelta(hours=8)), timezone(timedelta(hours=-3, minutes=-30))]
    ),
)


@settings(max_examples=100, deadline=None)
@given(
    ints=st.lists(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)), max_size=50),
    times=st.lists(st.one_of(st.none(), AWARE), max_size=50),
)
def test_literals_read_back_as_given(
    engine: Engine, ints: list[int | None], times: list[datetime | None]
) -> None:
    with engine.connect() as conn:
        got_ints, got_times = conn.execute(
            text("SELECT CAST(:ints AS integer[]), CAST(:times AS timestamptz[])"),
            {"ints": array_literal(ints), "times": array_literal(times)},
        ).one()
    assert got_ints == ints
    assert got_times == times  # aware datetimes compare by instant


def test_a_naive_datetime_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        array_literal([datetime(2026, 1, 1)])
