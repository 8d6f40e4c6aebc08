"""The worker's middleware list (actors/bootstrap.py): what runs on every message."""

from __future__ import annotations

from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import CurrentMessage, TimeLimit
from listbroker import AvailabilityGate, ExactRetries

from actors.bootstrap import UNUSED_MIDDLEWARE, default_middleware
from observability.job_observer import JobObserver


def test_the_worker_runs_only_the_middleware_its_actors_use_in_the_order_they_need() -> None:
    kinds = [type(m) for m in default_middleware(lambda: True)]
    assert not [k for k in kinds if issubclass(k, UNUSED_MIDDLEWARE)]
    # The gate first; the observer before ExactRetries (its after_ hook then sees the outcome).
    assert kinds[0] is AvailabilityGate
    assert kinds.index(JobObserver) < kinds.index(ExactRetries)
    assert {TimeLimit, CurrentMessage} <= set(kinds)


def test_an_actor_option_of_a_left_out_middleware_is_refused_not_ignored() -> None:
    broker = StubBroker(middleware=default_middleware())

    def job() -> None:
        pass

    for option in ("max_age", "notify_shutdown", "on_success", "pipe_ignore"):
        options: dict[str, Any] = {option: 1}
        declare = dramatiq.actor(broker=broker, actor_name=f"job_{option}", **options)
        with pytest.raises(ValueError, match=option):
            declare(job)
