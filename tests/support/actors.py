"""Declaring a Dramatiq actor on a test's own broker, typed (Dramatiq's `actor(fn, **options)`
form has no typed overload)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import dramatiq
from listbroker import ActorSpec

P = ParamSpec("P")
R = TypeVar("R")


def declare_actor(
    fn: Callable[P, R],
    broker: dramatiq.Broker,
    *,
    queue_name: str = "default",
    actor_name: str | None = None,
    **options: Any,
) -> dramatiq.Actor[P, R]:
    """`dramatiq.actor(fn, broker=broker, ...)`, named after the function unless told."""
    name = actor_name if actor_name is not None else getattr(fn, "__name__", "actor")
    return ActorSpec(fn, actor_name=name, queue_name=queue_name, options=options).declare(broker)
