"""Benchmark 6: regenerating 10,000 reports in batches vs one call per record, over HTTP.

    python -m bench.batch_regenerate [--n 10000] [--batch 1000] [--quick]

The real app under gunicorn (the Procfile's web line) on a loopback port; one client
thread, one fresh connection per request (http.client), admin bearer token. N records in
status 5 (生成失败) are regenerated:

- batched: `POST /api/admin/assessmentRecord/batchRegenerateReport` with `--batch` ids
  per call (at most 1000);
- single: `POST /api/admin/assessmentRecord/regenerateReport` once per id.

Each mode is checked: every record back in status 3 and N jobs in `report:queue` (no
worker runs; the queue is deleted afterwards). Target: batched >= 20 x faster.
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


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.batch_regenerate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--n", type=int, default=10_000, help="records (default 10000)")
    parser.add_argument("--batch", type=int, default=1000, help="ids per batch call (default 1000, max 1000)")
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
        single_s = one_mode(engine, port, ids, "single", args.batch)
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
    table = output.print_table(
        f"Regenerating {args.n} reports over HTTP (gunicorn, 1 client)",
        ["API", "calls", "seconds", "records/s"],
        rows,
    )
    output.log(
        f"  batched is {speedup:.1f} x faster (target >= 20 x: {'met' if speedup >= 20 else 'NOT met'})"
    )
    data = {
        "params": vars(args),
        "machine": output.machine_info(client),
        "summary": {"batched_s": batched_s, "single_s": single_s, "speedup": speedup, "met": speedup >= 20},
        "tables": [table],
    }
    output.write_results("batch_regenerate", data)
    return data


if __name__ == "__main__":
    main()
