"""What the middleware hooks of a batch cost per message, alone: no Redis call, no worker.

    python -m bench.batch_hooks [--batches 200] [--rounds 5] [--redis-url URL]

Batches of 32 messages of a no-op batched actor (the worker's middleware,
actors.bootstrap.default_middleware) go through the broker's `emit_before` and `emit_after` of
`process_message`, as a worker thread runs them, the consumer's started mark left out (a stub
origin): the CPU per message of the hooks, best of `--rounds`. The broker's client is built
from the URL but never called. Run it in two trees (`git archive COMMIT | tar -x -C DIR`, then
`PYTHONPATH=DIR/broker/src:DIR python -m bench.batch_hooks` from DIR) to compare them.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from typing import Any

import dramatiq
from listbroker import RedisListBroker
from listbroker.consumer import ListBatchProxy, ListMessageProxy

from actors.bootstrap import default_middleware

#: The batch size of the worker's report actor (REPORT_BATCH_SIZE's default).
BATCH_SIZE = 32


class _Origin:
    """Stands for the consumer: the started mark costs nothing here."""

    def start(self, proxies: list[ListMessageProxy]) -> None:
        pass


def hooks_us_per_message(broker: RedisListBroker, batches: int, rounds: int) -> float:
    def noop_batch(messages: list[Any]) -> None:
        pass

    actor: dramatiq.Actor[Any, Any] = dramatiq.actor(
        broker=broker,
        actor_name="bench_hooks",
        queue_name="bench_hooks",
        batch_size=BATCH_SIZE,
        batch_fn=noop_batch,
    )(lambda: None)
    origin: Any = _Origin()
    best = float("inf")
    for _ in range(rounds):
        made = [
            ListBatchProxy(
                [
                    ListMessageProxy(actor.message(), payload=b"", origin=origin, redeliveries=0)
                    for _ in range(BATCH_SIZE)
                ],
                actor.actor_name + ".batch",
            )
            for _ in range(batches)
        ]
        started = time.process_time()
        for batch in made:
            broker.emit_before("process_message", batch)
            broker.emit_after("process_message", batch, result=None)
        best = min(best, time.process_time() - started)
    return best / (batches * BATCH_SIZE) * 1e6


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--redis-url", default=os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15"))
    args = parser.parse_args(argv)
    broker = RedisListBroker(url=args.redis_url, middleware=default_middleware())
    try:
        per_message = hooks_us_per_message(broker, args.batches, args.rounds)
    finally:
        broker.close()
    print(f"batch hooks: {per_message:.2f} µs of CPU per message (batches of {BATCH_SIZE})")


if __name__ == "__main__":
    main()
