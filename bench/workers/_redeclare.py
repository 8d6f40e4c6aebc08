"""Redeclare the report actor with another body (same name, queue and options)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dramatiq

import actors.worker  # noqa: F401  (installs the broker and declares the real actor)
from redis_adapters.queues import REPORT_ACTOR_NAME


def real_report_actor() -> dramatiq.Actor[Any, Any]:
    return dramatiq.get_broker().get_actor(REPORT_ACTOR_NAME)


def redeclare(fn: Callable[[int], None], **options: Any) -> dramatiq.Actor[Any, Any]:
    """The report actor with body `fn`: the real one's name, queue and options (`options` win)."""
    broker = dramatiq.get_broker()
    real = broker.actors.pop(REPORT_ACTOR_NAME)  # Dramatiq refuses a second actor of one name
    decorate = dramatiq.actor(
        actor_name=real.actor_name,
        queue_name=real.queue_name,
        priority=real.priority,
        **{**real.options, **options},
    )
    return decorate(fn)
