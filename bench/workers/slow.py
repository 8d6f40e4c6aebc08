"""`dramatiq bench.workers.slow`: the report actor sleeps BENCH_SLOW_SECONDS, then generates."""

from __future__ import annotations

import os
import time

from bench.workers._redeclare import real_report_actor, redeclare

SLOW_SECONDS = float(os.environ.get("BENCH_SLOW_SECONDS", "5"))
_real = real_report_actor().fn


def generate_report(record_id: int) -> None:
    time.sleep(SLOW_SECONDS)
    _real(record_id)


redeclare(generate_report)
