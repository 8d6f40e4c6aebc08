"""Benchmark 6: regenerating 10,000 reports in batches vs one call per record, over HTTP.

    python -m bench.batch_regenerate [--n 10000] [--batch 1000] [--no-single] [--end-to-end] [--quick]

The real app under gunicorn (the Procfile's web line) on a loopback port; one client
thread, one fresh connection per request (http.client), admin bearer token. N records in
status 5 (生成失败) are regenerated:

- batched: `POST /api/admin/assessmentRecord/batchRegenerateReport` with `--batch` ids
  per call (at most 1000);
- single: `POST /api/admin/assessmentRecord/regenerateReport` once per id.

Each mode is checked: every record back in status 3 and N jobs in `report:queue` (no
worker runs; the queue is deleted afterwards). Target: batched >= 20 x faster.

`--end-to-end` (issue 15) adds a run with the Procfile's worker (WORKER_PROCESSES ×
WORKER_THREADS, 2 × 8 by default) started beforehand: the same batched calls, timed until
the last call returns and until every record is in status 4. `--no-single` skips the
one-call-per-record mode (100,000 single calls take long).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from actors.constants import REPORT_QUEUE_KEY
from bench import db, launch, output, stats, stores
from bench.http_load import Request, run_load

ADMIN = {"Authorization": f"Bearer {launch.BENCH_ADMIN_TOKEN}"}


def batched(ids: Sequence[int], size: int) -> Iterator[Request]:
    for start in range(0, len(ids), size):
        body = {"ids": list(ids[start : start + size])}
        yield ("POST", "/api/admin/assessmentRecord/batchRegenerateReport", body, ADMIN)


def single(ids: Sequence[int]) -> Iterator[Request]:
    for record_id in ids:
        yield ("POST", "/api/admin/assessmentRecord/regenerateReport", {"id": record_id}, ADMIN)


def one_mode(engine: Any, port: int, ids: list[int], mode: str, size: int) -> float:
    client = stores.redis_client(stores.redis_url())
    db.set_status(engine, ids, 5)
    client.delete(REPORT_QUEUE_KEY)
    requests = batched(ids, size) if mode == "batched" else single(ids)
    calls = -(-len(ids) // size) if mode == "batched" else len(ids)
    progress = output.Progress(mode, calls)
    started = time.perf_counter()
    result = run_load(port, requests, concurrency=1, time_limit_s=3600, on_done=progress.step)
    elapsed = time.perf_counter() - started
    progress.close()
    if result.errors:
        raise RuntimeError(f"{mode}: {len(result.errors)} failed calls, e.g. {result.errors[:3]}")
    statuses = db.statuses(engine, ids)
    queued = int(client.llen(REPORT_QUEUE_KEY))
    client.delete(REPORT_QUEUE_KEY)
    if statuses != {3: len(ids)} or queued != len(ids):
        raise RuntimeError(f"{mode}: statuses {statuses}, {queued} jobs queued for {len(ids)} records")
    return elapsed


def end_to_end(
    engine: Any, port: int, ids: list[int], size: int, shape: tuple[int, int]
) -> tuple[float, float]:
    """Batched calls with a worker running: (seconds until the last call returned, until all are in 4)."""
    client = stores.redis_client(stores.redis_url())
    db.set_status(engine, ids, 5)
    client.delete(REPORT_QUEUE_KEY)
    worker = launch.start_worker(
        stores.redis_url(), stores.database_url(), processes=shape[0], threads=shape[1]
    )
    try:
        progress = output.Progress("end to end", len(ids))
        started = time.perf_counter()
        result = run_load(port, batched(ids, size), concurrency=1, time_limit_s=3600)
        calls_s = time.perf_counter() - started
        if result.errors:
            raise RuntimeError(f"end to end: {len(result.errors)} failed calls, e.g. {result.errors[:3]}")
        done = 0
        while done < len(ids):
            time.sleep(0.5)
            now_done = db.statuses(engine, ids).get(4, 0)
            progress.step(now_done - done)
            done = now_done
            if not worker.alive():
                raise RuntimeError(f"worker died:\n{worker.output()[-2000:]}")
            if time.perf_counter() - started > max(300.0, len(ids) / 10):
                raise TimeoutError(f"only {done} of {len(ids)} reports generated")
        generated_s = time.perf_counter() - started
        progress.close()
    finally:
        worker.stop(graceful=False)
        client.delete(REPORT_QUEUE_KEY)
    return calls_s, generated_s


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.batch_regenerate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--n", type=int, default=10_000, help="records (default 10000)")
    parser.add_argument("--batch", type=int, default=1000, help="ids per batch call (default 1000, max 1000)")
    parser.add_argument("--no-single", action="store_true", help="skip the one-call-per-record mode")
    parser.add_argument(
        "--end-to-end",
        action="store_true",
        help="also run the batched calls with a worker, until all in status 4",
    )
    parser.add_argument("--worker-processes", type=int, default=2, help="for --end-to-end (default 2)")
    parser.add_argument("--worker-threads", type=int, default=8, help="for --end-to-end (default 8)")
    parser.add_argument("--quick", action="store_true", help="tiny size: --n 200 --batch 100")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.quick:
        args.n, args.batch = 200, 100
    redis_url, database_url = stores.redis_url(), stores.database_url()
    output.log(f"bench.batch_regenerate: {args.n} records, batches of {args.batch}, over HTTP (gunicorn)")
    engine = db.prepare(database_url)
    client = stores.redis_client(redis_url)
    stores.delete_own_keys(client)
    web, port = launch.start_web(redis_url, database_url)
    try:
        ids = db.insert_records(engine, args.n, status=5)
        batched_s = one_mode(engine, port, ids, "batched", args.batch)
        single_s = float("nan") if args.no_single else one_mode(engine, port, ids, "single", args.batch)
        shape = (args.worker_processes, args.worker_threads)
        e2e = end_to_end(engine, port, ids, args.batch, shape) if args.end_to_end else None
    finally:
        web.stop()
        db.delete_bench_records(engine)
        stores.delete_own_keys(client)
        engine.dispose()
    speedup = stats.ratio(single_s, batched_s)
    rows = [
        [
            f"batchRegenerateReport, {args.batch} ids/call",
            -(-args.n // args.batch),
            batched_s,
            args.n / batched_s,
        ],
        ["regenerateReport, 1 id/call", args.n, single_s, args.n / single_s],
    ]
    if e2e is not None:
        rows += [
            [
                f"batchRegenerateReport, worker {shape[0]} × {shape[1]} running: calls returned",
                -(-args.n // args.batch),
                e2e[0],
                args.n / e2e[0],
            ],
            ["… until all in status 4 (generated)", "", e2e[1], args.n / e2e[1]],
        ]
    table = output.print_table(
        f"Regenerating {args.n} reports over HTTP (gunicorn, 1 client)",
        ["API", "calls", "seconds", "records/s"],
        rows,
    )
    if not args.no_single:
        output.log(
            f"  batched is {speedup:.1f} x faster (target >= 20 x: {'met' if speedup >= 20 else 'NOT met'})"
        )
    data = {
        "params": vars(args),
        "machine": output.machine_info(client),
        "summary": {
            "batched_s": batched_s,
            "single_s": single_s,
            "speedup": speedup,
            "met": speedup >= 20,
            **({"end_to_end_calls_s": e2e[0], "end_to_end_generated_s": e2e[1]} if e2e else {}),
        },
        "tables": [table],
    }
    output.write_results("batch_regenerate", data)
    return data


if __name__ == "__main__":
    main()
