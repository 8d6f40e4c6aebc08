"""Batches: the messages of one actor handed to one call, each keeping its own outcome.

An actor declared with `batch_size=N` (N > 1) and `batch_fn=f` still takes one message per
call when called or sent as usual (`actor.send(42)`: the wire format is unchanged), but a
worker on a `RedisListBroker` hands up to N of its messages, as the consumer holds them, to
one call `f(messages)` of a companion actor, `<actor_name>.batch`, declared beside it with the
same queue and options (`Batches.after_declare_actor`). Dramatiq's worker thread hands over a
batch as it would one message, once, while the specification's per message still holds:

- middleware sees the messages, not the batch: the broker hands each message to every
  middleware's hooks on its own (`before_process_message` before the call, then
  `after_process_message` with that message's outcome, or `after_skip_message` for one refused
  on arrival), each in a context of its own (batchhooks.py); it marks the messages that run
  started in one step, the last thing before the call;
- each message is acknowledged on its own, and a failure is its own: `f` records it with
  `message.stuff_exception(error)` and returns; `ExactRetries` then retries that message
  alone on its schedule, or dead-letters it with its hook, or gives it back uncounted when the
  error is `DependencyUnavailable`, exactly as if it had raised alone;
- `f` raising fails every message of the batch not yet settled with that error, except those
  `f` marked finished (`message.mark_done()`, which acknowledges it at once: a message of the
  batch still waiting, on a lock say, does not hold the others in flight): a time limit
  striking a batch late fails only the messages whose work it interrupted. `f` raising
  `DependencyUnavailable` with no message failed on its own: nothing ran, and the broker gives
  all its messages back uncounted in one step (the gate closes, as for each of them);
- a message a middleware refuses on arrival (`ExactRetries`: a poison pill, a dead letter moved
  back by hand) is settled before the call and left out of `f`'s list;
- at shutdown, a batch never started goes back to the queue message by message.

The batch a worker runs is the consumer's `ListBatchProxy` (consumer.py); this module holds only
the actor options and the companion's declaration, so the consumer depends on it and not back.

A batch never waits for messages to come: it is what the consumer holds when a worker thread
asks for work (one message when the queue trickles), so batching adds no latency.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware

#: The actor option: the most messages of the actor one call of its `batch_fn` takes.
BATCH_SIZE_OPTION = "batch_size"
#: The actor option: the function that takes a batch, `f(messages: list[ListMessageProxy])`.
BATCH_FN_OPTION = "batch_fn"
#: The companion actor's name is the actor's with this suffix.
BATCH_ACTOR_SUFFIX = ".batch"

#: A batch function: it takes the list of the batch's messages (`ListMessageProxy`, consumer.py).
BatchFn = Callable[[list[Any]], None]


@dataclass(frozen=True)
class Batching:
    """How a consumer hands out an actor's messages: up to `size` per call of `actor_name`."""

    actor_name: str
    size: int


def batching_of(actor: dramatiq.Actor[Any, Any]) -> Batching | None:
    """The actor's batching, or None when its messages go one per call."""
    size = actor.options.get(BATCH_SIZE_OPTION)
    if actor.options.get(BATCH_FN_OPTION) is None or size is None or int(size) <= 1:
        return None
    return Batching(actor.actor_name + BATCH_ACTOR_SUFFIX, int(size))


class Batches(Middleware):
    """Accepts the actor options `batch_size` and `batch_fn`, and declares each batched actor's
    companion (a broker without this middleware refuses the options: Dramatiq checks them)."""

    @property
    def actor_options(self) -> set[str]:
        return {BATCH_SIZE_OPTION, BATCH_FN_OPTION}

    def after_declare_actor(self, broker: dramatiq.Broker, actor: dramatiq.Actor[Any, Any]) -> None:
        batching = batching_of(actor)
        if batching is None:
            return
        fn: BatchFn = actor.options[BATCH_FN_OPTION]
        # Its options are the actor's (retry schedule, hook, time limit, throws), so the
        # middleware that reads them per message reads the same for the batch.
        options = {k: v for k, v in actor.options.items() if k not in (BATCH_SIZE_OPTION, BATCH_FN_OPTION)}
        dramatiq.Actor(
            fn,
            broker=broker,
            actor_name=batching.actor_name,
            queue_name=actor.queue_name,
            priority=actor.priority,
            options=options,
        )
