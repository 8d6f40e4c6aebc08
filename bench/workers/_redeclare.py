"""Redeclare the report actor with another body (same name, queue and options)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dramatiq
from listbroker import BATCH_ACTOR_SUFFIX, BATCH_FN_OPTION, BATCH_SIZE_OPTION

import actors.worker  # noqa: F401  (installs the broker and declares the real actor)
from redis_adapters.queues import REPORT_ACTOR_NAME


def real_report_actor() -> dramatiq.Actor[Any, Any]:
    return dramatiq.get_broker().get_actor(REPORT_ACTOR_NAME)


def redeclare(fn: Callable[[int], None], **options: Any) -> dramatiq.Actor[Any, Any]:
    """The report actor with body `fn`: the real one's name, queue and options (`options` win),
    one message per call: `fn` takes one record, so the real actor's batches (its batch function
    and companion actor, listbroker's batches.py) are left out."""
    broker = dramatiq.get_broker()
    real = broker.actors.pop(REPORT_ACTOR_NAME)  # Dramatiq refuses a second actor of one name
    broker.actors.pop(REPORT_ACTOR_NAME + BATCH_ACTOR_SUFFIX, None)
    kept = {k: v for k, v in real.options.items() if k not in (BATCH_SIZE_OPTION, BATCH_FN_OPTION)}
    decorate = dramatiq.actor(
        actor_name=real.actor_name,
        queue_name=real.queue_name,
        priority=real.priority,
        **{**kept, **options},
    )
    return decorate(fn)
