"""End-to-end reports/s with the real generator, real PostgreSQL and Redis.

    python -m bench.e2e_reports [--n 2000] [--processes 1 2] [--threads 8] [--runs 2] [--quick]

N records in status 3 (生成中) with a full set of answers are queued on `report:queue`
in one LPUSH (`redis_adapters.RedisReportQueue`), and `dramatiq actors.worker` (the Procfile's
worker line, started beforehand and ready) generates their reports with
`actors.report.generate_report`. Timed from the LPUSH until every record is in status 4
(polled in PostgreSQL every 20 ms). Runs alternate between the process counts.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench import db, launch, output, stats, stores


def one_run(engine: Any, redis_url: str, database_url: str, *, n: int, processes: int, threads: int) -> float:
    from redis_adapters.report_queue import RedisReportQueue

    client = stores.redis_client(redis_url)
    stores.delete_own_keys(client)
    ids = db.insert_records(engine, n, status=3)
    worker = launch.start_worker(redis_url, database_url, processes=processes, threads=threads)
    try:
        progress = output.Progress(f"{processes} process(es)", n)
        started = time.perf_counter()
        RedisReportQueue(client).enqueue_many(ids)
        done = 0
        while done < n:
            time.sleep(0.02)
            now_done = db.statuses(engine, ids).get(4, 0)
            if now_done != done:
                progress.step(now_done - done)
                done = now_done
            if time.perf_counter() - started > max(120.0, n / 5):
                raise TimeoutError(
                    f"only {done} of {n} reports generated; worker log:\n{worker.output()[-2000:]}"
                )
            if not worker.alive():
                raise RuntimeError(f"worker died:\n{worker.output()[-2000:]}")
        elapsed = time.perf_counter() - started
        progress.close()
    finally:
        worker.stop(graceful=False)
        db.delete_bench_records(engine)
        stores.delete_own_keys(client)
    return n / elapsed


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e_reports", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="records per run (default 2000)")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=8, help="threads per worker process (default 8)")
    parser.add_argument("--runs", type=int, default=2, help="runs per process count (default 2)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: --n 50 --runs 1")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.quick:
        args.n, args.runs = 50, 1
    redis_url, database_url = stores.redis_url(), stores.database_url()
    output.log(
        f"bench.e2e_reports: n={args.n} processes={args.processes} threads={args.threads} runs={args.runs}"
    )
    engine = db.prepare(database_url)
    rates: dict[int, list[float]] = {p: [] for p in args.processes}
    try:
        for _ in range(args.runs):
            for processes in args.processes:
                rates[processes].append(
                    one_run(
                        engine, redis_url, database_url, n=args.n, processes=processes, threads=args.threads
                    )
                )
    finally:
        db.delete_bench_records(engine)
        engine.dispose()
    base = stats.median(rates[args.processes[0]])
    rows = [
        [
            f"{p} × `dramatiq actors.worker` ({args.threads} threads)",
            stats.median(v),
            stats.ratio(stats.median(v), base),
        ]
        for p, v in rates.items()
    ]
    table = output.print_table(
        f"End-to-end report generation, {args.n} records, median of {args.runs}",
        ["workers", "reports/s", f"vs {args.processes[0]} process"],
        rows,
    )
    data = {
        "params": vars(args),
        "machine": output.machine_info(stores.redis_client(redis_url)),
        "reports_per_s": {str(p): v for p, v in rates.items()},
        "median_reports_per_s": {str(p): stats.median(v) for p, v in rates.items()},
        "tables": [table],
    }
    output.write_results("e2e_reports", data)
    return data


if __name__ == "__main__":
    main()
