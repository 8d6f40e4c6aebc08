"""`dramatiq bench.workers.fail_once`: each record's first attempt fails, a retry records its start.

BENCH_RETRY_DELAY_MS replaces the first step of the schedule (10 s) for quick smoke runs.

Redis keys (deleted by the benchmark): `bench:retry:failed` hash record id -> time of the
failure, `bench:retry:started` hash record id -> time the retry attempt started
(seconds since the epoch, this host's clock, which is also the Redis server's).
"""

from __future__ import annotations

import os
import time

import redis

from bench.workers import FAILED_KEY, STARTED_KEY
from bench.workers._redeclare import redeclare
from config.settings import Settings
from redis_adapters.queues import RETRY_DELAYS_MS

_client = redis.Redis.from_url(Settings.from_env().redis_url)


def generate_report(record_id: int) -> None:
    now = time.time()
    if _client.hsetnx(FAILED_KEY, str(record_id), repr(now)):
        raise RuntimeError("first attempt fails (benchmark)")
    _client.hsetnx(STARTED_KEY, str(record_id), repr(now))


_first = int(os.environ.get("BENCH_RETRY_DELAY_MS") or RETRY_DELAYS_MS[0])
redeclare(generate_report, retry_delays=(_first, *RETRY_DELAYS_MS[1:]))
