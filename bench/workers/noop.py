"""`dramatiq bench.workers.noop`: the Procfile's worker (the real report actor on
`report:queue`) plus a no-op actor on a queue of its own (bench.scaling).

One worker serves both of bench.scaling's measurements, the no-op drain and the real
reports, so each process count is started once per round.
"""

from __future__ import annotations

import dramatiq

import actors.worker  # noqa: F401  (installs the broker and declares the real actor)
from bench.workers import NOOP_ACTOR, NOOP_QUEUE


@dramatiq.actor(queue_name=NOOP_QUEUE, actor_name=NOOP_ACTOR, max_retries=0)
def bench_noop() -> None:
    """Nothing: what is measured is the broker and the worker around it."""
