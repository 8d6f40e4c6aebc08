"""Lateness of the 10 s retry step when 1,000 messages fail at once.

    python -m bench.retry_lateness [--n 1000] [--quick]

`dramatiq bench.workers.fail_once` (the real broker, ExactRetries and the 10/30/60 s
schedule; only the actor's body differs: each record's first attempt raises) takes N
report messages LPUSHed at once. Each failure is scheduled atomically by SETTLE into
`report:queue:delayed`, scored with its due time (failure time on the Redis clock
+ 10,000 ms). Two figures per message:

- re-push lateness (the target): when the broker moved it from the delayed set back
  to `report:queue`, minus its due time. Seen from the broker's side: this process polls
  the delayed set every `--poll-ms` (TIME and ZRANGEBYSCORE in one pipeline) and takes
  the first poll at which a member is gone; so each figure is an upper bound, at most
  one poll interval (plus one round trip) above the truth.
- attempt lateness: when the retry attempt started in the actor (its clock, the same
  host's), minus the due time: re-push lateness plus the wait in the queue behind the
  other retries that came due with it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any, cast

from bench import launch, output, stats, stores
from bench.workers import STARTED_KEY
from redis_adapters.queues import REPORT_DELAYED_KEY, REPORT_QUEUE_KEY, RETRY_DELAYS_MS
from redis_adapters.report_message import ReportQueueMessage
from scripts.processes import wait_until

FIRST_DELAY_MS = RETRY_DELAYS_MS[0]


def run(n: int, poll_ms: float, threads: int, delay_ms: int) -> dict[str, Any]:
    redis_url, database_url = stores.redis_url(), stores.database_url()
    client = stores.redis_client(redis_url)
    stores.delete_own_keys(client)
    worker = launch.start_worker(
        redis_url,
        database_url,
        module="bench.workers.fail_once",
        threads=threads,
        env={"BENCH_RETRY_DELAY_MS": str(delay_ms)},
    )
    try:
        client.lpush(REPORT_QUEUE_KEY, *[ReportQueueMessage.new(i).encode() for i in range(1, n + 1)])
        progress = output.Progress("failures scheduled", n)
        due: dict[bytes, float] = {}
        deadline = time.monotonic() + 60 + n / 50
        while len(due) < n:
            members = client.zrange(REPORT_DELAYED_KEY, 0, -1, withscores=True)
            new = {m: s for m, s in cast("list[tuple[bytes, float]]", members) if m not in due}
            due.update(new)
            if new:
                progress.step(len(new))
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(due)} of {n} failures scheduled:\n{worker.output()[-2000:]}")
            time.sleep(0.05)
        progress.close()

        progress = output.Progress("retries re-pushed", n)
        repushed: dict[bytes, float] = {}
        order = sorted(due, key=due.__getitem__)  # by due time
        first_waiting = 0
        window_ms = 1000.0
        seconds, micros = client.time()
        now_ms = seconds * 1000 + micros / 1000
        deadline = time.monotonic() + delay_ms / 1000 + 60
        while first_waiting < len(order):
            ahead = due[order[first_waiting]] - now_ms - window_ms
            if ahead > 0:
                time.sleep(ahead / 1000)  # nothing comes due before then
            limit = now_ms + window_ms
            pipe = client.pipeline(transaction=False)
            pipe.time()
            pipe.zrangebyscore(REPORT_DELAYED_KEY, "-inf", limit)
            (seconds, micros), present = pipe.execute()
            now_ms = seconds * 1000 + micros / 1000
            present_set = set(present)
            gone = 0
            for member in order[first_waiting:]:
                if due[member] > limit:
                    break
                if member not in present_set and member not in repushed:
                    repushed[member] = now_ms
                    gone += 1
            while first_waiting < len(order) and order[first_waiting] in repushed:
                first_waiting += 1
            if gone:
                progress.step(gone)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(order) - len(repushed)} retries never re-pushed")
            time.sleep(poll_ms / 1000)
        progress.close()

        wait_until(
            lambda: int(client.hlen(STARTED_KEY)) >= n, timeout=60, what="every retry attempt", interval=0.05
        )
        started = {int(k): float(v) for k, v in client.hgetall(STARTED_KEY).items()}
    finally:
        worker.stop(graceful=False)
        stores.delete_own_keys(client)

    repush_late = [(repushed[m] - score) / 1000 for m, score in due.items()]
    by_record = {ReportQueueMessage.decode(m.split(b"|", 1)[1]).record_id: score for m, score in due.items()}
    attempt_late = [started[r] - score / 1000 for r, score in by_record.items()]
    return {"repush_late_s": repush_late, "attempt_late_s": attempt_late}


def describe(values: Sequence[float]) -> list[float]:
    return [
        stats.percentile(values, 50),
        stats.percentile(values, 95),
        stats.percentile(values, 99),
        max(values),
        min(values),
    ]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.retry_lateness", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--n", type=int, default=1000, help="messages failing at once (default 1000)")
    parser.add_argument("--poll-ms", type=float, default=5.0, help="delayed-set poll interval (default 5 ms)")
    parser.add_argument("--threads", type=int, default=8, help="worker threads (default 8)")
    parser.add_argument(
        "--delay-ms", type=int, default=FIRST_DELAY_MS, help="the first retry step (default: the real 10000)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny size: --n 20")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.quick:
        args.n = 20
    output.log(f"bench.retry_lateness: n={args.n}, {args.delay_ms} ms step, poll {args.poll_ms} ms")
    result = run(args.n, args.poll_ms, args.threads, args.delay_ms)
    rows = [
        ["re-push − due (broker side, the target)", *[v * 1000 for v in describe(result["repush_late_s"])]],
        [
            "retry attempt start − due (includes queue wait)",
            *[v * 1000 for v in describe(result["attempt_late_s"])],
        ],
    ]
    table = output.print_table(
        f"Retry lateness, {args.n} failures at once, {args.delay_ms / 1000:g} s step (milliseconds)",
        ["measure", "p50", "p95", "p99", "max", "min"],
        rows,
    )
    p99 = stats.percentile(result["repush_late_s"], 99)
    verdict = "met" if p99 <= 0.25 else "NOT met"
    output.log(f"  target p99 <= 0.25 s: {verdict} (p99 {p99:.3f} s, poll resolution {args.poll_ms} ms)")
    data = {
        "params": vars(args),
        "machine": output.machine_info(stores.redis_client(stores.redis_url())),
        "summary": {
            "repush": dict(
                zip(["p50", "p95", "p99", "max", "min"], describe(result["repush_late_s"]), strict=True)
            ),
            "attempt": dict(
                zip(["p50", "p95", "p99", "max", "min"], describe(result["attempt_late_s"]), strict=True)
            ),
            "target_p99_s": 0.25,
            "met": p99 <= 0.25,
        },
        "samples": result,
        "tables": [table],
    }
    output.write_results("retry_lateness", data)
    return data


if __name__ == "__main__":
    main()
