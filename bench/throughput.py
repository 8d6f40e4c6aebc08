"""Broker throughput with a no-op actor, ours against its peers.

    python -m bench.throughput [--n 20000] [--runs 3] [--threads 1 8] [--quick]

For each system, N messages are enqueued (timed: one call per message, and batched),
then drained by a worker (timed: from starting the worker to the N-th call of the
actor). Every run is a fresh interpreter (`--child`), so no system warms or pollutes
another, and the systems are interleaved run by run (A B C D A B C D ...), all against
the same Redis. Figures are medians of the runs; ratios are ours / peer.

Systems:
  ours            listbroker.RedisListBroker, the worker's default middleware
  ours-batch      the same, the no-op actor batched (batch_size=32, listbroker's batches.py):
                  up to 32 messages per call, each still acknowledged on its own
  dramatiq        Dramatiq's RedisBroker, default prefetch (2 x threads)
  dramatiq-p100   Dramatiq's RedisBroker, dramatiq_queue_prefetch=100
  stub            Dramatiq's StubBroker: no Redis at all, the floor of a Dramatiq worker
  rq              RQ SimpleWorker in burst mode (one process, one job at a time)

Each child also reports the Redis requests it sent (client side) and the server's
`INFO commandstats` delta; `bench.roundtrips` reads those from a private server.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, cast

import redis

from bench import launch, output, stats, stores

QUEUE = "bench-noop"
ACTOR = "bench_noop"
DRAMATIQ_NAMESPACE = "bench-dramatiq"
RQ_QUEUE = "bench-noop"

#: The batch size of `ours-batch`'s no-op actor (the worker's REPORT_BATCH_SIZE default).
NOOP_BATCH_SIZE = 32

SYSTEMS = ("ours", "ours-p100", "ours-batch", "dramatiq", "dramatiq-p100", "stub", "rq")
LABELS = {
    "ours": "ours (RedisListBroker)",
    "ours-p100": "ours, prefetch 100",
    "ours-batch": f"ours, a batched actor (batch_size={NOOP_BATCH_SIZE})",
    "dramatiq": "Dramatiq RedisBroker",
    "dramatiq-p100": "Dramatiq RedisBroker, prefetch 100",
    "stub": "Dramatiq StubBroker",
    "rq": "RQ SimpleWorker (burst)",
}
#: The numerators of the drain ratios: ours, and ours with the no-op actor batched.
OURS = ("ours", "ours-batch")
#: Systems whose worker has a thread count; RQ's SimpleWorker runs one job at a time.
THREADED = {"ours", "ours-p100", "ours-batch", "dramatiq", "dramatiq-p100", "stub"}
#: Systems run with dramatiq_queue_prefetch=100 (Dramatiq's own knob, read at import).
PREFETCH_100 = {"ours-p100", "dramatiq-p100"}
BATCH = 1000

# -- the child: one system, one run -----------------------------------------------------------


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class Meter:
    """Client round trips and server commands between `start` and `stop`."""

    def __init__(self, admin: redis.Redis | None, counter: stats.RoundTripCounter) -> None:
        self.admin = admin
        self.counter = counter
        self.rt0 = 0
        self.cs0: dict[str, int] = {}

    def start(self) -> None:
        self.cs0 = stats.command_stats(self.admin) if self.admin else {}
        self.rt0 = self.counter.value

    def stop(self) -> dict[str, Any]:
        round_trips = self.counter.value - self.rt0
        if self.admin is None:
            return {"round_trips": round_trips, "commands": {}}
        delta = stats.stats_delta(self.cs0, stats.command_stats(self.admin))
        delta.pop("info", None)  # our own INFO calls
        return {"round_trips": round_trips - 1, "commands": delta}


def child_dramatiq(system: str, threads: int, n: int, url: str | None, batch: int) -> dict[str, Any]:
    import dramatiq
    from dramatiq import group

    counter = stats.RoundTripCounter().install()
    admin = redis.Redis.from_url(url) if url else None
    broker: dramatiq.Broker
    if system in ("ours", "ours-p100", "ours-batch"):
        from listbroker import RedisListBroker

        from actors.bootstrap import default_middleware

        assert url
        broker = RedisListBroker(url=url, middleware=default_middleware())
    elif system in ("dramatiq", "dramatiq-p100"):
        from dramatiq.brokers.redis import RedisBroker

        broker = RedisBroker(url=url, namespace=DRAMATIQ_NAMESPACE)
    elif system == "stub":
        from dramatiq.brokers.stub import StubBroker

        broker = StubBroker()
        broker.emit_after("process_boot")
    else:
        raise SystemExit(f"unknown system {system}")
    dramatiq.set_broker(broker)
    if admin is not None:
        stores.delete_own_keys(admin)

    calls = itertools.count(1)
    done = threading.Event()

    def bench_noop() -> None:
        if next(calls) == n:
            done.set()

    batch_calls = itertools.count()

    def bench_noop_batch(messages: list[Any]) -> None:
        # Each message of the batch counts as one processed (each is acknowledged on its own).
        next(batch_calls)
        for _ in messages:
            bench_noop()

    batched: dict[str, Any] = (
        {"batch_size": NOOP_BATCH_SIZE, "batch_fn": bench_noop_batch} if system == "ours-batch" else {}
    )
    actor = dramatiq.actor(broker=broker, queue_name=QUEUE, actor_name=ACTOR, max_retries=0, **batched)(
        bench_noop
    )

    def enqueue_batched() -> None:
        for start in range(0, n, batch):
            messages = [actor.message() for _ in range(min(batch, n - start))]
            enqueue_many = getattr(broker, "enqueue_many", None)
            if enqueue_many is not None:
                enqueue_many(messages)
            else:
                group(messages, broker=broker).run()

    batched_s = _timed(enqueue_batched)
    broker.flush(QUEUE)

    meter = Meter(admin, counter)
    meter.start()
    single_s = _timed(lambda: [actor.send() for _ in range(n)])
    enqueue_io = meter.stop()

    worker = dramatiq.Worker(broker, worker_threads=threads)
    meter.start()
    cpu = time.process_time()
    started = time.perf_counter()
    worker.start()
    if not done.wait(timeout=max(120.0, n / 50)):
        raise SystemExit(f"{system}: only {next(calls) - 1} of {n} messages processed")
    drain_s = time.perf_counter() - started
    drain_cpu_s = time.process_time() - cpu
    drain_io = meter.stop()
    prefetch = worker.queue_prefetch
    worker.stop(timeout=10_000)
    broker.close()
    if admin is not None:
        stores.delete_own_keys(admin)
    return {
        "system": system,
        "threads": threads,
        "n": n,
        "prefetch": prefetch,
        "enqueue_single_s": single_s,
        "enqueue_batched_s": batched_s,
        "drain_s": drain_s,
        "drain_cpu_s": drain_cpu_s,
        "enqueue_io": enqueue_io,
        "drain_io": drain_io,
        # ours-batch: the calls the n messages took (n / calls: the mean batch).
        "batch_calls": next(batch_calls) if system == "ours-batch" else None,
    }


def child_rq(n: int, url: str, batch: int) -> dict[str, Any]:
    from rq import Queue, SimpleWorker

    from bench import jobs

    counter = stats.RoundTripCounter().install()
    admin = redis.Redis.from_url(url)
    stores.delete_own_keys(admin)
    conn = redis.Redis.from_url(url)
    queue = Queue(RQ_QUEUE, connection=conn)

    def enqueue_batched() -> None:
        for start in range(0, n, batch):
            datas = [Queue.prepare_data(jobs.rq_noop) for _ in range(min(batch, n - start))]
            with conn.pipeline() as pipe:
                queue.enqueue_many(datas, pipeline=pipe)
                pipe.execute()

    batched_s = _timed(enqueue_batched)
    cast(Any, queue).empty()
    stores.delete_own_keys(admin, ["rq:*"])

    meter = Meter(admin, counter)
    meter.start()
    single_s = _timed(lambda: [queue.enqueue(jobs.rq_noop) for _ in range(n)])
    enqueue_io = meter.stop()

    jobs.target = n
    worker = SimpleWorker([queue], connection=conn)
    meter.start()
    cpu = time.process_time()
    started = time.perf_counter()
    worker.work(burst=True, logging_level="WARNING")
    drain_s = time.perf_counter() - started
    drain_cpu_s = time.process_time() - cpu
    drain_io = meter.stop()
    processed = jobs.processed()
    if processed != n:
        raise SystemExit(f"rq: {processed} of {n} jobs processed")
    stores.delete_own_keys(admin)
    return {
        "system": "rq",
        "threads": 1,
        "n": n,
        "prefetch": 1,
        "enqueue_single_s": single_s,
        "enqueue_batched_s": batched_s,
        "drain_s": drain_s,
        "drain_cpu_s": drain_cpu_s,
        "enqueue_io": enqueue_io,
        "drain_io": drain_io,
    }


def run_child(args: argparse.Namespace) -> None:
    url = args.redis_url
    if args.system == "rq":
        result = child_rq(args.n, url, args.batch)
    else:
        threads = args.threads[0]
        result = child_dramatiq(
            args.system, threads, args.n, None if args.system == "stub" else url, args.batch
        )
    launch.emit_result(result)


# -- the parent: interleaved runs, medians, ratios ----------------------------------------------


def plan(systems: Sequence[str], threads: Sequence[int], runs: int) -> list[tuple[int, str, int]]:
    """(run, system, threads) in interleaved order: every system once per round."""
    order = []
    for run in range(runs):
        for t in threads:
            for system in systems:
                if system in THREADED or t == threads[0]:
                    order.append((run, system, t if system in THREADED else 1))
    return order


def measure(
    systems: Sequence[str],
    threads: Sequence[int],
    runs: int,
    n: int,
    url: str,
    *,
    batch: int = BATCH,
    label: str = "throughput",
) -> list[dict[str, Any]]:
    order = plan(systems, threads, runs)
    progress = output.Progress(label, len(order))
    results = []
    for run, system, t in order:
        env = {"dramatiq_queue_prefetch": "100"} if system in PREFETCH_100 else {}
        args = ["--child", "--system", system, "--threads", str(t), "--n", str(n)]
        args += ["--batch", str(batch), "--redis-url", url]
        result = launch.run_child("bench.throughput", args, timeout=max(300.0, n / 20), env=env)
        result["run"] = run
        results.append(result)
        progress.step(note=f"{system}@{t}: {n / result['drain_s']:,.0f} msg/s")
    progress.close()
    return results


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per (system, threads) and ours/peer ratios."""
    drain: dict[tuple[str, int], list[float]] = {}
    cpu: dict[tuple[str, int], list[float]] = {}
    single: dict[str, list[float]] = {}
    batched: dict[str, list[float]] = {}
    for r in results:
        key = (r["system"], r["threads"])
        drain.setdefault(key, []).append(r["n"] / r["drain_s"])
        cpu.setdefault(key, []).append(r["drain_cpu_s"] / r["n"] * 1e6)
        base = r["system"].removesuffix("-p100")
        single.setdefault(base, []).append(r["n"] / r["enqueue_single_s"])
        batched.setdefault(base, []).append(r["n"] / r["enqueue_batched_s"])
    drain_median = {f"{s}@{t}": stats.median(v) for (s, t), v in drain.items()}
    out: dict[str, Any] = {
        "drain_msgs_per_s": drain_median,
        "enqueue_single_msgs_per_s": {s: stats.median(v) for s, v in single.items()},
        "enqueue_batched_msgs_per_s": {s: stats.median(v) for s, v in batched.items()},
        "drain_runs": {f"{s}@{t}": v for (s, t), v in drain.items()},
        "drain_cpu_us_per_msg": {f"{s}@{t}": stats.median(v) for (s, t), v in cpu.items()},
    }
    ratios: dict[str, float] = {}
    for label, value in drain_median.items():
        system, threads = label.split("@")
        for mine in OURS:
            ours = drain_median.get(f"{mine}@{threads}") or drain_median.get(f"{mine}@1")
            if not system.startswith("ours") and ours:
                ratios[f"{mine}/{label}"] = stats.ratio(ours, value)
    for kind in ("enqueue_single_msgs_per_s", "enqueue_batched_msgs_per_s"):
        ours_rate = out[kind].get("ours")
        for system, value in out[kind].items():
            if system != "ours" and ours_rate:
                ratios[f"{kind.removesuffix('_msgs_per_s')}: ours/{system}"] = stats.ratio(ours_rate, value)
    out["ratios"] = ratios
    # The same ratios within each round of the interleaving, to show their spread.
    per_round: dict[str, list[float]] = {}
    by_run = {(r["run"], r["system"], r["threads"]): r["n"] / r["drain_s"] for r in results}
    for (run, system, threads), rate in by_run.items():
        for mine in OURS:
            ours_rate = by_run.get((run, mine, threads))
            if not system.startswith("ours") and ours_rate:
                per_round.setdefault(f"{mine}/{system}@{threads}", []).append(ours_rate / rate)
    out["ratios_per_round"] = per_round
    return out


def report(summary: dict[str, Any], systems: Sequence[str], threads: Sequence[int]) -> list[str]:
    drain = summary["drain_msgs_per_s"]
    cpu = summary["drain_cpu_us_per_msg"]

    def key(system: str, t: int) -> str:
        return f"{system}@{t}" if system in THREADED else ("rq@1" if t == threads[0] else "")

    # The ratio columns: ours, and the batched no-op actor when it ran.
    shown = [mine for mine in OURS if mine == "ours" or mine in systems]
    rows = []
    for system in systems:
        row: list[Any] = [LABELS[system]]
        row += [drain.get(key(system, t), float("nan")) for t in threads]
        for numerator in shown:
            for t in threads:
                ours, peer = drain.get(f"{numerator}@{t}"), drain.get(key(system, t))
                mine = system.startswith("ours")
                row.append(stats.ratio(ours, peer) if ours and peer and not mine else float("nan"))
        row += [cpu.get(key(system, t), float("nan")) for t in threads]
        rows.append(row)
    header = (
        ["system"]
        + [f"msg/s @{t}" for t in threads]
        + [f"{mine}/peer @{t}" for mine in shown for t in threads]
        + [f"CPU µs/msg @{t}" for t in threads]
    )
    tables = [output.print_table("Drain (no-op actor), median of runs", header, rows)]
    rows = []
    for system in [s for s in systems if s not in PREFETCH_100]:
        single = summary["enqueue_single_msgs_per_s"].get(system, float("nan"))
        batched = summary["enqueue_batched_msgs_per_s"].get(system, float("nan"))
        ours_single = summary["enqueue_single_msgs_per_s"].get("ours", float("nan"))
        ours_batched = summary["enqueue_batched_msgs_per_s"].get("ours", float("nan"))
        rows.append(
            [
                LABELS[system],
                single,
                batched,
                float("nan") if system == "ours" else stats.ratio(ours_single, single),
                float("nan") if system == "ours" else stats.ratio(ours_batched, batched),
            ]
        )
    header = [
        "system",
        "single msg/s",
        f"batched msg/s ({BATCH}/call)",
        "ours/peer single",
        "ours/peer batched",
    ]
    tables.append(output.print_table("Enqueue, median msg/s", header, rows))
    return tables


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="messages per run (default 20000)")
    parser.add_argument("--runs", type=int, default=3, help="interleaved runs per system (default 3)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 8], help="worker threads (default 1 8)")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: --n 500 --runs 1")
    parser.add_argument("--batch", type=int, default=BATCH, help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", default=None, help="default: TEST_REDIS_URL, then REDIS_URL")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--system", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.runs = 500, 1
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.child:
        run_child(args)
        return {}
    url = args.redis_url or stores.redis_url()
    output.log(f"bench.throughput: n={args.n} runs={args.runs} threads={args.threads} redis={url}")
    results = measure(args.systems, args.threads, args.runs, args.n, url, batch=args.batch)
    summary = summarize(results)
    tables = report(summary, args.systems, args.threads)
    data = {
        "params": {"n": args.n, "runs": args.runs, "threads": args.threads, "batch": args.batch},
        "machine": output.machine_info(redis.Redis.from_url(url)),
        "summary": summary,
        "runs": results,
        "tables": tables,
    }
    output.write_results("throughput", data)
    return data


if __name__ == "__main__":
    main()
