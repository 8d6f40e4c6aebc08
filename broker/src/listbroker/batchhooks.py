"""Where a batch meets middleware: each of its messages goes through the hooks on its own.

A worker runs a batch (batches.py) as one synthetic Dramatiq message, the consumer's
`ListBatchProxy`. Middleware never sees it: `RedisListBroker.emit_before` and `emit_after`
(broker.py) hand the signals of a batch to this module, which turns them into the signals of
its messages (`ListMessageProxy`), so the broker's middleware and an application's see one
message per message, with its own outcome, as when messages run one per call:

- `before_process_message`: each message in turn goes through every middleware's hook, in
  the middleware's order. A message whose chain raises `SkipMessage` (refused on arrival: a
  poison pill, a dead letter moved back by hand, a message too old) is left out of the call;
  when every message was refused the batch raises `SkipMessage` and is not called. Then the
  messages that run are marked started, all in one step (`RedisListConsumer.start`: a death
  of the worker from here on counts a lost delivery for each), the last thing before the call.
- `after_process_message`, once the call returned or raised: each message that ran gets it
  with its own outcome, in the order of the batch: the error the batch function recorded for
  it (`stuff_exception`), else the call's error (stuffed into the message too), else none; a
  message the function marked done (`mark_done`) succeeded whatever the call did afterwards.
  Each refused message gets `after_skip_message` instead, at the same point: no after-hook
  runs before the call, so middleware that keeps state per thread (TimeLimit's deadline)
  keeps it for the whole call. When the call raised `DependencyUnavailable` and no message
  has an error of its own, nothing ran: the messages go back to their queue uncounted, in
  one step, before their hooks run (they find them settled).
- `ack` / `nack`: each message gets `nack` if it failed for good (`fail()`), else `ack`.

Each message's hooks run in a copy of the worker thread's context (`contextvars`), the same
one for its before- and after-hooks: a context variable a middleware sets for a message (the
current message, the ids its log lines carry) is that message's in its hooks, is reset there,
and is not seen by the call, which runs in the thread's own context (a batch's own lines
carry no one message's ids; the batch function sets each message's where it logs for it).
A worker thread running a batch thus has several messages in progress at once, all of the
same actor: what counts running messages per thread (an observer's "busy threads") should
count threads, not messages.

Hooks a middleware does not override (Dramatiq's `Middleware` no-ops) are not called, and
errors are handled as Dramatiq's `Broker.emit_before` / `emit_after` do: a `MiddlewareError`
other than `SkipMessage` propagates, any other error is logged and the next hook runs.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterable
from typing import Any

import dramatiq
from dramatiq.errors import ConnectionClosed
from dramatiq.middleware import Middleware, MiddlewareError, SkipMessage

from listbroker.consumer import ListBatchProxy, ListMessageProxy
from listbroker.errors import DependencyUnavailable

logger = logging.getLogger(__name__)

#: The signals of a batch that the broker hands to this module.
BATCH_SIGNALS = frozenset({"process_message", "skip_message", "ack", "nack"})

Hook = Callable[..., None]


def hooks(middleware: Iterable[Middleware], name: str) -> list[Hook]:
    """The middleware's hooks `name`, those that do something (not Dramatiq's no-op)."""
    noop = getattr(Middleware, name)
    return [getattr(m, name) for m in middleware if getattr(type(m), name, None) is not noop]


def _emit(broker: dramatiq.Broker, name: str, chain: list[Hook], *args: Any, **kwargs: Any) -> None:
    """Call `chain` as Dramatiq's Broker.emit_before / emit_after do: an error is logged and the
    next hook runs, but for a before-hook's MiddlewareError, which propagates."""
    for hook in chain:
        try:
            hook(broker, *args, **kwargs)
        except Exception as exc:
            if isinstance(exc, MiddlewareError) and name.startswith("before_"):
                raise
            broker.logger.critical(
                "Unexpected failure in %s of %r.", name, getattr(hook, "__self__", hook), exc_info=True
            )


def _before_item(broker: dramatiq.Broker, chain: list[Hook], item: ListMessageProxy) -> bool:
    """Run `item`'s before-hooks as Dramatiq's Broker.emit_before does; False: it is refused."""
    for hook in chain:
        try:
            hook(broker, item)
        except SkipMessage as exc:
            if item.failed:
                item.stuff_exception(exc)  # as Dramatiq's worker does for a skipped message
            return False
        except MiddlewareError:
            raise
        except Exception:
            broker.logger.critical(
                "Unexpected failure in before_process_message of %r.",
                getattr(hook, "__self__", hook),
                exc_info=True,
            )
    return True


def emit_before(broker: dramatiq.Broker, signal: str, batch: ListBatchProxy) -> None:
    """`broker.emit_before(signal, batch)`, for each of the batch's messages."""
    if signal == "process_message":
        _before_process(broker, batch)
        return
    if signal in ("ack", "nack"):
        _each_outcome(broker, "before_", batch)


def emit_after(broker: dramatiq.Broker, signal: str, batch: ListBatchProxy, **kwargs: Any) -> None:
    """`broker.emit_after(signal, batch, ...)`, for each of the batch's messages."""
    if signal in ("process_message", "skip_message"):
        _after_process(broker, batch, kwargs.get("exception"))
    elif signal in ("ack", "nack"):
        _each_outcome(broker, "after_", batch)


def _before_process(broker: dramatiq.Broker, batch: ListBatchProxy) -> None:
    chain = hooks(broker.middleware, "before_process_message")
    running: list[ListMessageProxy] = []
    batch.running = running
    contexts, refused = batch.contexts, batch.refused
    for item in batch.items:
        context = contextvars.copy_context()
        contexts.append(context)
        runs = context.run(_before_item, broker, chain, item)
        refused.append(not runs)
        if runs:
            running.append(item)
    if not running:
        raise SkipMessage("every message of the batch was refused on arrival")
    # From here on, a death of this worker counts a lost delivery for each (one step).
    running[0]._origin.start(running)


def _after_process(broker: dramatiq.Broker, batch: ListBatchProxy, exception: BaseException | None) -> None:
    running = batch.running if batch.running is not None else batch.items
    if isinstance(exception, DependencyUnavailable) and not any(
        item.failure for item in running if not item.settled
    ):
        _give_back(batch, exception)
    reverse = list(reversed(broker.middleware))
    processed = hooks(reverse, "after_process_message")
    skipped = hooks(reverse, "after_skip_message")
    contexts, refused = batch.contexts, batch.refused
    for index, item in enumerate(batch.items):
        # An item whose before-hooks never ran (a MiddlewareError stopped the batch) still gets
        # its after-hooks, as Dramatiq calls every after-hook whatever ran before.
        context = contexts[index] if index < len(contexts) else contextvars.copy_context()
        if index < len(refused) and refused[index]:
            context.run(_emit, broker, "after_skip_message", skipped, item)
            continue
        outcome = item.failure
        if outcome is None and exception is not None and not item.done:
            item.stuff_exception(exception)
            outcome = exception
        context.run(_emit, broker, "after_process_message", processed, item, result=None, exception=outcome)


def _give_back(batch: ListBatchProxy, exception: DependencyUnavailable) -> None:
    """The batch could not start: its messages go back uncounted, in one step."""
    returned = sum(1 for item in batch.args[0] if not item.settled)
    try:
        batch.give_back()
    except ConnectionClosed as exc:
        logger.warning(
            "%s: could not be returned to its queue (%s); its acknowledgement will.",
            batch,
            exc.__cause__ or exc,
        )
        return
    logger.warning(
        "%s could not start (%s); %d message(s) returned to the queue uncounted.",
        batch,
        exception,
        returned,
    )


def _each_outcome(broker: dramatiq.Broker, prefix: str, batch: ListBatchProxy) -> None:
    """`ack` or `nack` hooks for each message: `nack` for one that failed for good."""
    middleware = broker.middleware if prefix == "before_" else list(reversed(broker.middleware))
    acked = hooks(middleware, prefix + "ack")
    nacked = hooks(middleware, prefix + "nack")
    if not acked and not nacked:
        return
    for item in batch.items:
        if item.failed:
            _emit(broker, prefix + "nack", nacked, item)
        else:
            _emit(broker, prefix + "ack", acked, item)
