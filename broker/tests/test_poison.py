"""A poison pill among innocent jobs, in real worker processes SIGKILLed by it (poison_app.py).

Only a delivery that had started when its worker died counts a lost delivery: the jobs
merely prefetched beside the poison pill go back uncounted, run, and are never dead-lettered;
the poison pill is dead-lettered on the arrival after its `max_lost_deliveries`-th loss.
"""

from __future__ import annotations

import sys

import redis
from listbroker.retries import DEFAULT_MAX_LOST_DELIVERIES
from poison_app import run_restarts


def test_a_poison_pill_takes_no_innocent_job_with_it(redis_url: str, redis_client: redis.Redis) -> None:
    outcome = run_restarts(sys.executable, redis_url, max_runs=DEFAULT_MAX_LOST_DELIVERIES + 3)
    assert outcome.charged == {"suicide(1,)"}, outcome  # never a job held beside it
    assert outcome.dead == [
        ("suicide", [1], f"lost with its worker {DEFAULT_MAX_LOST_DELIVERIES + 1} times"),
    ], outcome
    assert outcome.ran == [0, 1, 2], outcome  # each innocent job ran, once
    # It killed its worker exactly the threshold's worth plus one times, then was refused on
    # arrival by the next worker, which ran the rest.
    assert outcome.suicide_starts == DEFAULT_MAX_LOST_DELIVERIES + 1, outcome
    assert len(outcome.runs) == DEFAULT_MAX_LOST_DELIVERIES + 2, outcome
