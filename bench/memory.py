"""Worker RSS at 0, 50k and 100k processed messages, our broker.

    python -m bench.memory [--n 100000] [--step 50000] [--quick]

A fresh process runs a Dramatiq Worker (8 threads) on `RedisListBroker` with the
worker's default middleware and a no-op actor. Messages are enqueued `--step` at a time
(`enqueue_many`) and drained; RSS (psutil) is read after start-up (0 processed) and after
each step, once the queue is empty, after a `gc.collect()`. A flat line means nothing
is kept per message: proxies, acknowledgements and payloads are all let go.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from bench import launch, output, stores

QUEUE = "bench-memory"


def child(n: int, step: int, url: str) -> dict[str, Any]:
    import dramatiq
    import psutil  # type: ignore[import-untyped]
    from listbroker import RedisListBroker

    from actors.bootstrap import default_middleware

    process = psutil.Process()
    broker = RedisListBroker(url=url, middleware=default_middleware())
    dramatiq.set_broker(broker)
    admin = stores.redis_client(url)
    stores.delete_own_keys(admin)
    calls = itertools.count(1)
    target = [0]
    done = threading.Event()

    def bench_memory_noop() -> None:
        if next(calls) == target[0]:
            done.set()

    actor = dramatiq.actor(broker=broker, queue_name=QUEUE, max_retries=0)(bench_memory_noop)
    worker = dramatiq.Worker(broker, worker_threads=8)
    worker.start()
    time.sleep(1.0)
    gc.collect()
    samples = [{"processed": 0, "rss_mb": process.memory_info().rss / 2**20}]
    processed = 0
    while processed < n:
        batch = min(step, n - processed)
        done.clear()
        target[0] = processed + batch
        for start in range(0, batch, 1000):
            broker.enqueue_many([actor.message() for _ in range(min(1000, batch - start))])
        if not done.wait(timeout=max(120.0, batch / 100)):
            raise SystemExit(f"only {next(calls) - 1} of {target[0]} messages processed")
        processed += batch
        broker.join(QUEUE, timeout=30_000)
        time.sleep(0.5)  # let the last acks be flushed
        gc.collect()
        samples.append({"processed": processed, "rss_mb": process.memory_info().rss / 2**20})
        print(f"  processed {processed}: rss {samples[-1]['rss_mb']:.1f} MiB", file=sys.stderr, flush=True)
    worker.stop(timeout=10_000)
    broker.close()
    stores.delete_own_keys(admin)
    return {"samples": samples}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="messages in all (default 100000)")
    parser.add_argument("--step", type=int, default=50_000, help="messages between readings (default 50000)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: --n 2000 --step 1000")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.quick:
        args.n, args.step = 2000, 1000
    url = args.redis_url or stores.redis_url()
    if args.child:
        launch.emit_result(child(args.n, args.step, url))
        return {}
    output.log(f"bench.memory: {args.n} messages, a reading every {args.step}")
    result = launch.run_child(
        "bench.memory",
        ["--child", "--n", str(args.n), "--step", str(args.step), "--redis-url", url],
        timeout=max(600.0, args.n / 50),
        show_stderr=True,
    )
    samples = result["samples"]
    base = samples[0]["rss_mb"]
    rows = [[s["processed"], s["rss_mb"], s["rss_mb"] - base] for s in samples]
    table = output.print_table(
        "Worker RSS (RedisListBroker, 8 threads, no-op actor)", ["processed", "RSS MiB", "Δ MiB"], rows
    )
    data = {
        "params": {"n": args.n, "step": args.step},
        "machine": output.machine_info(stores.redis_client(url)),
        "samples": samples,
        "tables": [table],
    }
    output.write_results("memory", data)
    return data


if __name__ == "__main__":
    main()
