"""The report queue's figures for operators (the admin API's /queue/stats)."""

from __future__ import annotations

import redis
from listbroker import QueueFigures
from listbroker import queue_figures as broker_queue_figures

from redis_adapters.queues import REPORT_QUEUE_NAME

__all__ = ["QueueFigures", "queue_figures"]


def queue_figures(
    client: redis.Redis, queue_name: str = REPORT_QUEUE_NAME, *, hash_tag: bool = False
) -> QueueFigures:
    """One consistent reading of the report queue's figures (a single Lua call)."""
    return broker_queue_figures(client, queue_name, hash_tag=hash_tag)
