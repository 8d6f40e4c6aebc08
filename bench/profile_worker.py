"""Where a worker process spends the interpreter while it generates reports (py-spy).

    python -m bench.profile_worker [--n 3000] [--threads 16] [--rate 200] [--quick]

One worker process (`dramatiq actors.worker --processes 1 --threads T`) generates N
reports of records in status 3 while `py-spy record --gil --threads --format raw` samples
it (root, or ptrace allowed). Each sample of the thread holding the GIL is assigned to
the innermost frame of a known package, so the table reads "what the interpreter was
doing": SQLAlchemy, psycopg, redis-py, Dramatiq, our broker, the service code, ... Shares,
not times (py-spy falls behind its rate on a loaded machine).
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import db, launch, output, stores

#: Innermost-frame buckets, first match wins: the start of a frame's file path (py-spy names
#: files relative to their sys.path entry: "dramatiq/worker.py") → the name in the table.
BUCKETS: tuple[tuple[str, str], ...] = (
    ("sqlalchemy/", "SQLAlchemy"),
    ("psycopg/", "psycopg's Python layer"),
    ("psycopg_pool/", "psycopg's Python layer"),
    ("redis/", "redis-py"),
    ("dramatiq/", "Dramatiq"),
    ("broker/src/listbroker/", "broker library (broker/src/listbroker/)"),
    ("redis_adapters/", "report codec (redis_adapters/)"),
    ("observability/", "observability middleware (observability/)"),
    ("actors/", "actors (report actor, adapters)"),
    ("services/domain/scoring", "scoring"),
    ("services/", "service code (services/)"),
    ("prometheus_client/", "prometheus_client"),
    ("logging/", "logging"),
    ("pythonjsonlogger/", "logging"),
    ("json/", "json / uuid / datetime"),
    ("uuid", "json / uuid / datetime"),
    ("datetime", "json / uuid / datetime"),
    ("threading", "threading (locks, conditions)"),
    ("queue.py", "threading (locks, conditions)"),
)


def bucket(stack: str, buckets: Sequence[tuple[str, str]] = BUCKETS) -> str:
    """The bucket of the innermost frame of a collapsed stack ("f (file:line);g (...)")."""
    for frame in reversed(stack.split(";")):
        where = frame.rpartition(" (")[2]
        for prefix, name in buckets:
            if where.startswith(prefix) or f"/{prefix}" in where:
                return name
    return "other"


def shares(raw: str, buckets: Sequence[tuple[str, str]] = BUCKETS) -> tuple[dict[str, float], int]:
    """Per bucket, its share of the samples of `raw` (py-spy's collapsed format)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            counts[bucket(stack, buckets)] += int(count)
    total = sum(counts.values())
    return {name: n / total for name, n in counts.most_common()} if total else {}, total


def worker_child(pid: int) -> int:
    """The pid of the Dramatiq worker process forked by the main process `pid`."""
    import psutil  # type: ignore[import-untyped]

    children = psutil.Process(pid).children()
    if not children:
        raise RuntimeError("the worker has no child process")
    return int(children[0].pid)


def start_spy(pid: int, out: Path, *, rate: int, duration_s: int | None = None) -> subprocess.Popen[str]:
    """`py-spy record` of the GIL-holding thread of process `pid` into `out` (collapsed stacks),
    until SIGINT or, with `duration_s`, for that long once attached; its stderr piped."""
    argv = [str(Path(sys.executable).with_name("py-spy")), "record", "--gil", "--threads", "--nonblocking"]
    argv += ["--format", "raw", "-r", str(rate), "-o", str(out), "--pid", str(pid)]
    if duration_s is not None:
        argv += ["--duration", str(duration_s)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile_worker", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--n", type=int, default=3000, help="reports to generate (default 3000)")
    parser.add_argument("--threads", type=int, default=16, help="worker threads (default 16, the Procfile's)")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second (default 200)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: --n 300")
    args = parser.parse_args(argv)
    if args.quick:
        args.n = 300
    from redis_adapters.report_queue import RedisReportQueue

    redis_url, database_url = stores.redis_url(), stores.database_url()
    engine = db.prepare(database_url)
    client = stores.redis_client(redis_url)
    ids = db.insert_records(engine, args.n, status=3)
    worker = launch.start_worker(redis_url, database_url, processes=1, threads=args.threads)
    out = Path(tempfile.mkdtemp(prefix="mi-profile-")) / "profile.txt"
    spy = start_spy(worker_child(worker.pid), out, rate=args.rate)
    try:
        time.sleep(1.0)  # py-spy attached
        started = time.perf_counter()
        RedisReportQueue(client).enqueue_many(ids)
        deadline = started + max(120.0, args.n / 5)
        while db.statuses(engine, ids).get(4, 0) < len(ids):
            if time.perf_counter() > deadline or not worker.alive():
                raise RuntimeError(f"generation did not finish; worker log:\n{worker.output()[-2000:]}")
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
    finally:
        spy.send_signal(2)  # SIGINT: py-spy writes its file and exits
        _, errors = spy.communicate(timeout=60)
        worker.stop(graceful=False)
        stores.delete_own_keys(client)
        db.delete_bench_records(engine)
    table, total = shares(out.read_text() if out.exists() else "")
    if not total:
        raise RuntimeError(f"py-spy recorded nothing: {errors[-1000:]}")
    output.log(
        f"bench.profile_worker: {args.n} reports in {elapsed:.1f} s, 1 process × {args.threads} threads, "
        f"{total} samples of the thread holding the GIL"
    )
    table_text = output.print_table(
        f"Worker profile: {args.n} reports, 1 process × {args.threads} threads, {total} GIL samples",
        ["where (innermost known frame)", "share"],
        [[name, f"{share:.1%}"] for name, share in table.items()],
    )
    data: dict[str, Any] = {
        "reports": args.n,
        "threads": args.threads,
        "seconds": elapsed,
        "samples": total,
        "shares": table,
        "tables": [table_text],
    }
    output.write_results("profile_worker", data)
    return data


if __name__ == "__main__":
    main()
