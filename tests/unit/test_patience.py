"""The release step's patience with a database it cannot reach (services/persistence/patience.py)."""

from __future__ import annotations

import pytest
import sqlalchemy.exc

from services.domain.errors import DatabaseUnavailable
from services.persistence.patience import FIRST_PAUSE_S, MAX_PAUSE_S, DatabaseNotReached, patiently


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def refused() -> sqlalchemy.exc.OperationalError:
    return sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("connection refused\ndetail"))


def test_a_step_is_run_again_until_the_database_answers() -> None:
    time = FakeTime()
    errors: list[Exception] = [refused(), DatabaseUnavailable("database unreachable: restarting"), refused()]

    def step() -> str:
        if errors:
            raise errors.pop(0)
        return "migrated"

    assert patiently("migrations", step, wait_s=60, clock=time.clock, sleep=time.sleep) == "migrated"
    assert time.pauses == [FIRST_PAUSE_S, FIRST_PAUSE_S * 2, FIRST_PAUSE_S * 4]


def test_the_wait_ends_with_the_last_reason() -> None:
    time = FakeTime()

    def step() -> None:
        raise refused()

    with pytest.raises(DatabaseNotReached, match=r"^connection refused$"):
        patiently("migrations", step, wait_s=20, clock=time.clock, sleep=time.sleep)
    assert time.now <= 20
    assert max(time.pauses) == MAX_PAUSE_S


def test_another_error_is_not_waited_for() -> None:
    time = FakeTime()

    def step() -> None:
        raise sqlalchemy.exc.ProgrammingError("ALTER", {}, Exception("syntax error"))

    with pytest.raises(sqlalchemy.exc.ProgrammingError):
        patiently("migrations", step, wait_s=60, clock=time.clock, sleep=time.sleep)
    assert time.pauses == []
