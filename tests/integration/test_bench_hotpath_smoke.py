"""bench/hotpath.py runs end to end with tiny sizes, checks its own counts and cleans up."""

from __future__ import annotations

import redis
from sqlalchemy import Engine, text

from bench import hotpath, stores


def test_hotpath_benchmark_smoke(engine: Engine, redis_client: redis.Redis) -> None:
    data = hotpath.main(["--quick", "--records", "6", "--answers", "3", "--events", "25", "--batch", "4"])
    for workload in ("answers", "events"):
        figures = data["results"][workload]
        assert figures["batched_per_s"] > 0
        assert figures["per_item_per_s"] > 0
        assert figures["ratio"] > 0
    assert "| answers persisted / s |" in data["table"]
    # Nothing of the benchmark is left behind.
    assert not list(redis_client.scan_iter(match="bench:*"))
    with engine.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM event_log WHERE actor = 'bench'")) == 0
        records = conn.scalar(
            text("SELECT count(*) FROM assessment_records WHERE user_id >= :base"),
            {"base": stores.BENCH_USER_BASE},
        )
        assert records == 0
