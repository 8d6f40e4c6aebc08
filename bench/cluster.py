"""No-op throughput of our broker: one Redis with today's keys, one Redis with hash-tagged
keys, and a private three-master Redis Cluster (REDIS_HASH_TAGS, docs/cluster.md).

    python -m bench.cluster [--n 5000] [--threads 8] [--runs 3]

Every mode runs against servers of its own, started here and stopped afterwards (a
redis-server, and scripts/cluster.py's cluster), never the test servers. For each run, N
messages are enqueued in batches of 1000 (timed), then drained by an in-process Dramatiq
worker (timed: from starting the worker to the N-th call). Modes are interleaved run by
run; figures are medians.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import dramatiq
from listbroker import RedisListBroker

from actors.bootstrap import default_middleware
from bench import output, stores
from redis_adapters.redis_clients import redis_client
from scripts.cluster import redis_cluster

QUEUE = "bench-cluster"
BATCH = 1000


def one_run(url: str, hash_tags: bool, n: int, threads: int) -> tuple[float, float]:
    """(enqueue s, drain s) of N no-op messages."""
    client = redis_client(url, socket_timeout=30)
    broker = RedisListBroker(client=client, hash_tags=hash_tags, middleware=default_middleware())
    dramatiq.set_broker(broker)
    calls = itertools.count(1)
    done = threading.Event()

    def bench_noop() -> None:
        if next(calls) == n:
            done.set()

    actor: Any = dramatiq.actor(
        broker=broker, queue_name=QUEUE, actor_name="bench_cluster_noop", max_retries=0
    )(bench_noop)
    broker.flush(QUEUE)
    start = time.perf_counter()
    for first in range(0, n, BATCH):
        broker.enqueue_many([actor.message() for _ in range(min(BATCH, n - first))])
    enqueue_s = time.perf_counter() - start
    worker = dramatiq.Worker(broker, worker_threads=threads, worker_timeout=100)
    start = time.perf_counter()
    worker.start()
    if not done.wait(600):
        raise SystemExit("the worker did not drain the queue in 600 s")
    drain_s = time.perf_counter() - start
    worker.stop()
    broker.flush(QUEUE)
    broker.close()
    return enqueue_s, drain_s


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=5_000, help="messages per run (default 5000)")
    parser.add_argument("--threads", type=int, default=8, help="worker threads (default 8)")
    parser.add_argument("--runs", type=int, default=3, help="runs per mode (default 3)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    rows = []
    results: dict[str, Any] = {"n": args.n, "threads": args.threads, "runs": args.runs, "modes": {}}
    with stores.private_redis() as single, redis_cluster() as cluster:
        modes = [
            ("one Redis, today's keys", single, False),
            ("one Redis, hash-tagged keys", single, True),
            ("Redis Cluster, 3 masters", cluster, True),
        ]
        # Interleaved run by run (A B C A B C ...), so a noisy moment hits every mode alike.
        runs: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in modes}
        for _ in range(args.runs):
            for label, url, tags in modes:
                runs[label].append(one_run(url, tags, args.n, args.threads))
        for label, _, _ in modes:
            enqueue = statistics.median(r[0] for r in runs[label])
            drain = statistics.median(r[1] for r in runs[label])
            results["modes"][label] = {"enqueue_s": enqueue, "drain_s": drain, "runs": runs[label]}
            rows.append([label, f"{args.n / enqueue:,.0f}", f"{args.n / drain:,.0f}"])
            output.log(f"{label}: enqueue {args.n / enqueue:,.0f}/s, drain {args.n / drain:,.0f}/s")
    table = output.print_table(
        f"No-op throughput, {args.n} messages, {args.threads} threads, median of {args.runs}",
        ["mode", "enqueue (msg/s, batches of 1000)", "drain (msg/s)"],
        rows,
    )
    results["tables"] = [table]
    output.write_results("cluster", results)
    return results


if __name__ == "__main__":
    main()
