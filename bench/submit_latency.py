"""submitAnswers latency under concurrent load, fast generation vs 5 s generation.

    python -m bench.submit_latency [--rate 20] [--duration 60] [--runs 2] [--quick]

The real app runs under gunicorn (the Procfile's web line: 2 sync workers) on a free
loopback port, on the benchmark's PostgreSQL and Redis. A load generator (threads +
http.client, a fresh connection per request, bounded in count and time) posts
`POST /api/assessment/submitAnswers` with a full set of answers, each for a record of its
own (status 2, a bench user's token), open-loop at `--rate` requests/s from up to
`--concurrency` client threads. Scenarios, interleaved run by run:

- fast: `dramatiq actors.worker` (8 threads), generation takes milliseconds;
- slow: `dramatiq bench.workers.slow`, the same actor sleeping 5 s before generating,
  with threads enough (rate x 5 s x 1.5) to keep up, so that in the steady state both
  scenarios do the same generation work per second, only 5 s apart;
- none (with --no-worker): no worker at all, jobs just wait in `report:queue`.

Each run first sends `--slow-seconds` + 2 s of warm-up requests (not measured), so the
slow worker is generating when the measured requests start. The product's promise is
that the user does not wait for the report: p50 and p99 must be within 5 % between
fast and slow.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import text

from bench import db, launch, output, stats, stores
from bench.http_load import Request, run_load

SCENARIOS = {
    "fast": "actors.worker",
    "slow": "bench.workers.slow",
    "none": "",
}


def submit_requests(ids: Sequence[int], question_ids: Sequence[int]) -> Iterator[Request]:
    from web.auth import issue_user_token

    answers = [{"questionId": q, "value": q * 7 % 5 + 1} for q in question_ids]
    for index, record_id in enumerate(ids):
        token = issue_user_token(launch.BENCH_SECRET, stores.BENCH_USER_BASE + index)
        yield (
            "POST",
            "/api/assessment/submitAnswers",
            {"recordId": record_id, "answers": answers},
            {"Authorization": f"Bearer {token}"},
        )


def one_run(
    engine: Any, port: int, scenario: str, *, rate: float, duration: float, concurrency: int, slow_s: float
) -> dict[str, Any]:
    redis_url, database_url = stores.redis_url(), stores.database_url()
    client = stores.redis_client(redis_url)
    stores.delete_own_keys(client)
    db.delete_bench_records(engine)
    warmup = int(rate * (slow_s + min(2.0, duration)))
    requests = int(rate * duration)
    ids = db.insert_records(engine, requests + warmup, status=2)
    with engine.begin() as conn:
        question_ids = list(conn.scalars(text("SELECT id FROM questions WHERE is_active ORDER BY id")))
    worker = None
    if SCENARIOS[scenario]:
        threads = max(8, int(rate * slow_s * 1.5)) if scenario == "slow" else 8
        worker = launch.start_worker(
            redis_url,
            database_url,
            module=SCENARIOS[scenario],
            threads=threads,
            env={"BENCH_SLOW_SECONDS": str(slow_s)},
        )
    try:
        stream = submit_requests(ids, question_ids)
        warm = run_load(
            port, itertools.islice(stream, warmup), concurrency=concurrency, time_limit_s=60, rate=rate
        )
        if warm.errors:
            raise RuntimeError(f"warm-up failed: {warm.errors[:3]}")
        progress = output.Progress(f"{scenario}", requests)
        result = run_load(
            port,
            stream,
            concurrency=concurrency,
            time_limit_s=duration * 3 + 30,
            rate=rate,
            on_done=progress.step,
        )
        progress.close()
        if result.errors:
            raise RuntimeError(f"{len(result.errors)} failed requests, e.g. {result.errors[:3]}")
        generated = db.statuses(engine, ids).get(4, 0)
    finally:
        if worker is not None:
            worker.stop(graceful=False)
        db.delete_bench_records(engine)
        stores.delete_own_keys(client)
    lat = result.latencies_s
    return {
        "scenario": scenario,
        "count": len(lat),
        "p50_ms": stats.percentile(lat, 50) * 1000,
        "p90_ms": stats.percentile(lat, 90) * 1000,
        "p99_ms": stats.percentile(lat, 99) * 1000,
        "max_ms": max(lat) * 1000,
        "throughput_rps": len(lat) / result.elapsed_s,
        "reports_done_during_run": generated,
        "latencies_ms": [round(x * 1000, 3) for x in lat],
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.submit_latency", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rate", type=float, default=20.0, help="requests per second (default 20)")
    parser.add_argument("--duration", type=float, default=60.0, help="measured seconds per run (default 60)")
    parser.add_argument("--concurrency", type=int, default=8, help="client threads at most (default 8)")
    parser.add_argument("--runs", type=int, default=2, help="interleaved runs per scenario (default 2)")
    parser.add_argument(
        "--slow-seconds", type=float, default=5.0, help="generation time of 'slow' (default 5)"
    )
    parser.add_argument("--no-worker", action="store_true", help="also run the scenario without any worker")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: 2 s, 0.2 s generation, 1 run")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.quick:
        args.duration, args.runs, args.slow_seconds = 2.0, 1, 0.2
    scenarios = ["fast", "slow"] + (["none"] if args.no_worker else [])
    redis_url, database_url = stores.redis_url(), stores.database_url()
    output.log(
        f"bench.submit_latency: {args.rate}/s for {args.duration} s x {args.runs} runs per scenario"
        f" {scenarios}, up to {args.concurrency} clients"
    )
    engine = db.prepare(database_url)
    web, port = launch.start_web(redis_url, database_url)
    runs: list[dict[str, Any]] = []
    try:
        for _ in range(args.runs):
            for scenario in scenarios:
                runs.append(
                    one_run(
                        engine,
                        port,
                        scenario,
                        rate=args.rate,
                        duration=args.duration,
                        concurrency=args.concurrency,
                        slow_s=args.slow_seconds,
                    )
                )
    finally:
        web.stop()
        db.delete_bench_records(engine)
        engine.dispose()
    summary: dict[str, dict[str, Any]] = {}
    for scenario in scenarios:
        mine = [r for r in runs if r["scenario"] == scenario]
        pooled = [x for r in mine for x in r["latencies_ms"]]
        summary[scenario] = {
            "p50_ms": stats.percentile(pooled, 50),
            "p90_ms": stats.percentile(pooled, 90),
            "p99_ms": stats.percentile(pooled, 99),
            "max_ms": max(pooled),
            "samples": len(pooled),
            "p50_ms_runs": [r["p50_ms"] for r in mine],
            "p99_ms_runs": [r["p99_ms"] for r in mine],
            "throughput_rps": stats.median([r["throughput_rps"] for r in mine]),
            "reports_done_during_run": stats.median([r["reports_done_during_run"] for r in mine]),
        }
    fast = summary["fast"]
    rows = []
    for scenario in scenarios:
        s = summary[scenario]
        rows.append(
            [
                scenario,
                s["p50_ms"],
                s["p90_ms"],
                s["p99_ms"],
                stats.ratio(s["p50_ms"], fast["p50_ms"]),
                stats.ratio(s["p99_ms"], fast["p99_ms"]),
                " / ".join(f"{v:.1f}" for v in s["p99_ms_runs"]),
                s["reports_done_during_run"],
            ]
        )
    table = output.print_table(
        f"submitAnswers latency, {args.rate:g} req/s for {args.duration:g} s × {args.runs} runs"
        f" (generation {args.slow_seconds:g} s when slow; percentiles of all runs' requests)",
        [
            "generation",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "p50 / fast",
            "p99 / fast",
            "p99 ms per run",
            "reports/run",
        ],
        rows,
    )
    p50_gap = abs(stats.ratio(summary["slow"]["p50_ms"], fast["p50_ms"]) - 1)
    p99_gap = abs(stats.ratio(summary["slow"]["p99_ms"], fast["p99_ms"]) - 1)
    met = p50_gap <= 0.05 and p99_gap <= 0.05
    output.log(f"  within 5 %: {'met' if met else 'NOT met'} (p50 {p50_gap:.1%}, p99 {p99_gap:.1%} apart)")
    data = {
        "params": vars(args),
        "machine": output.machine_info(stores.redis_client(redis_url)),
        "summary": summary,
        "gaps": {"p50": p50_gap, "p99": p99_gap, "met": met},
        "runs": runs,
        "tables": [table],
    }
    output.write_results("submit_latency", data)
    return data


if __name__ == "__main__":
    main()
