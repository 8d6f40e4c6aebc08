"""Actors declared without a broker, so that importing the module that defines them builds none.

`@dramatiq.actor` declares the actor on the global broker at import, and builds a
default broker if none is set. An `ActorSpec` holds the same declaration until an entry
module (the one `dramatiq` is started with) calls `declare(broker)`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, TypeVar

import dramatiq

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class ActorSpec(Generic[P, R]):
    fn: Callable[P, R]
    actor_name: str
    queue_name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    priority: int = 0

    def declare(self, broker: dramatiq.Broker) -> dramatiq.Actor[P, R]:
        """Declare the actor on `broker`, with Dramatiq's own checks of names and options."""
        decorate = dramatiq.actor(
            broker=broker,
            actor_name=self.actor_name,
            queue_name=self.queue_name,
            priority=self.priority,
            **self.options,
        )
        actor: dramatiq.Actor[P, R] = decorate(self.fn)
        return actor


def actor_spec(
    *, actor_name: str, queue_name: str, priority: int = 0, **options: Any
) -> Callable[[Callable[P, R]], ActorSpec[P, R]]:
    """`@actor_spec(...)` where `@dramatiq.actor(...)` would declare the actor at import."""

    def wrap(fn: Callable[P, R]) -> ActorSpec[P, R]:
        return ActorSpec(fn, actor_name=actor_name, queue_name=queue_name, options=options, priority=priority)

    return wrap
