"""Report generation against the database's own limit: the worker beside lean psycopg loops.

    python -m bench.generation_limit [--n 2000] [--runs 3] [--processes 2] [--threads 8]
                                     [--modes pipeline sql sql100] [--batch 100]
                                     [--worker-shapes 2x8 4x2 ...] [--quick]

Same PostgreSQL, same records (N in status 3 with full answers, inserted afresh for every
run), modes interleaved round by round:

- `pipeline`: the Procfile's worker (`dramatiq actors.worker`, P processes × T threads,
  started and ready beforehand) generating from `report:queue`, one job per record; timed from
  the LPUSH of the N jobs until the queue holds nothing queued, delayed or in flight (its
  figures, polled every 20 ms; all N records are then checked to be in status 4);
- `sql`: `bench.sql_generate`, a plain psycopg loop (P processes × T threads, one
  connection each) doing the same work per record in one transaction and two pipelined round
  trips; timed from GO until every child is done;
- `sql100`: the same, `--batch` records per transaction.

`--worker-shapes PxT ...` runs the pipeline once per worker shape in every round (named
`pipeline PxT`), to choose the Procfile's WORKER_PROCESSES × WORKER_THREADS by measurement;
`PxTbB` also sets REPORT_BATCH_SIZE=B (`2x32b1`: one job per call and per transaction).
`--base DIR` runs the pipeline a second time in every round from the code in DIR (an export
of another commit: `git archive <commit> | tar -x -C DIR`), named `base pipeline ...`: before
and after a change, side by side in one run.

Before the rounds, the loops' output is checked against the product's generator (each record's
status, results and summary must be the same; see `check_baselines`).

Besides reports/s, the CPU seconds of the clients (the worker's processes, or the loop's)
and of the PostgreSQL backends serving this database (psutil on the pids of
`pg_stat_activity`, the benchmark's own connection left out) during the timed section: their
share shows whether the database or the client is the limit. For the pipeline, the mean
number of records per transaction (a batch): the worker's `mi_report_group_size`
histogram, written to a metrics folder of the run's own (`PROMETHEUS_MULTIPROC_DIR`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
from sqlalchemy import Engine

from bench import ROOT, db, launch, output, stats, stores
from bench.cpu import backend_cpu, cpu_delta, tree_cpu

MODES = ("pipeline", "sql", "sql100")


#: A pipeline's worker: processes, threads and REPORT_BATCH_SIZE (None: the default).
Shape = tuple[int, int, int | None]


def run_pipeline(
    engine: Engine,
    redis_url: str,
    database_url: str,
    ids: list[int],
    shape: Shape,
    *,
    cwd: Path = ROOT,
) -> dict[str, Any]:
    from redis_adapters.queue_figures import queue_figures
    from redis_adapters.report_queue import RedisReportQueue

    client = stores.redis_client(redis_url)
    metrics_dir = tempfile.TemporaryDirectory(prefix="mi-bench-metrics-")
    worker = launch.start_worker(
        redis_url,
        database_url,
        processes=shape[0],
        threads=shape[1],
        env={
            "PROMETHEUS_MULTIPROC_DIR": metrics_dir.name,
            **({} if shape[2] is None else {"REPORT_BATCH_SIZE": str(shape[2])}),
        },
        cwd=cwd,
    )
    try:
        pg0, client0 = backend_cpu(engine), tree_cpu(worker.pid)
        started = time.perf_counter()
        RedisReportQueue(client).enqueue_many(ids)
        deadline = started + max(120.0, len(ids) / 5)
        while True:
            # The queue's figures (one Lua call) tell when nothing is queued, delayed or in
            # flight: every job was acknowledged, which the worker does once its report has
            # committed. Polling the records' statuses instead sent the N ids to PostgreSQL
            # every 20 ms, a load (on the database and this process) the loops do not carry.
            if queue_figures(client).pending == 0:
                elapsed = time.perf_counter() - started
                if db.statuses(engine, ids).get(4, 0) == len(ids):
                    break
            if time.perf_counter() > deadline or not worker.alive():
                raise RuntimeError(f"pipeline did not finish; worker log:\n{worker.output()[-2000:]}")
            time.sleep(0.02)
        pg_cpu, client_cpu = cpu_delta(pg0, backend_cpu(engine)), tree_cpu(worker.pid) - client0
    finally:
        worker.stop(graceful=False)
        stores.delete_own_keys(client)
    groups, grouped = group_sizes(metrics_dir.name)
    metrics_dir.cleanup()
    return {
        "seconds": elapsed,
        "pg_cpu_s": pg_cpu,
        "client_cpu_s": client_cpu,
        "groups": groups,
        "mean_group": grouped / groups if groups else None,
    }


def group_sizes(metrics_dir: str) -> tuple[int, int]:
    """(groups, records in them) from the worker processes' `mi_report_group_size` files."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=metrics_dir)  # type: ignore[no-untyped-call]  # registers itself
    count = registry.get_sample_value("mi_report_group_size_count") or 0.0
    total = registry.get_sample_value("mi_report_group_size_sum") or 0.0
    return int(count), int(total)


def run_sql(engine: Engine, database_url: str, ids: list[int], args: Any, *, batch: int) -> dict[str, Any]:
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.sql_generate"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(args.processes)
    ]
    try:
        for index, child in enumerate(children):
            assert child.stdin is not None
            task = {
                "database_url": database_url,
                "ids": ids[index :: args.processes],
                "threads": args.threads,
                "batch": batch,
            }
            child.stdin.write(json.dumps(task) + "\n")
            child.stdin.flush()
        for child in children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "READY":
                raise RuntimeError("bench.sql_generate failed to start")
        pg0 = backend_cpu(engine)
        started = time.perf_counter()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("GO\n")
            child.stdin.flush()
        results = []
        for child in children:
            assert child.stdout is not None
            line = child.stdout.readline()
            if not line.startswith(launch.RESULT_PREFIX):
                raise RuntimeError(f"bench.sql_generate failed: {line!r}")
            results.append(json.loads(line[len(launch.RESULT_PREFIX) :]))
        elapsed = time.perf_counter() - started
        pg_cpu = cpu_delta(pg0, backend_cpu(engine))
        for child in children:
            assert child.stdin is not None
            child.stdin.write("EXIT\n")
            child.stdin.flush()
            child.wait(timeout=30)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    generated = sum(int(r["generated"]) for r in results)
    if generated != len(ids):
        raise RuntimeError(f"sql loop generated {generated} of {len(ids)} reports")
    return {"seconds": elapsed, "pg_cpu_s": pg_cpu, "client_cpu_s": sum(float(r["cpu_s"]) for r in results)}


def check_baselines(engine: Engine, database_url: str, args: Any) -> None:
    """The loops (sql: one record per transaction; sql100: --batch) write what the product's
    generator writes: each generates fresh records, then the records go back to status 3 and
    `services.usecases.reports.generate_reports` (the worker's path) generates them again;
    every record's status, results and summary must be the same. Raises if not."""
    from services.persistence.db import make_session_factory
    from services.persistence.uow import UnitOfWork
    from services.usecases.reports import generate_reports

    size = min(args.n, 200)
    for batch in sorted({1, args.batch}):
        ids = db.insert_records(engine, size, status=3)
        try:
            run_sql(engine, database_url, ids, args, batch=batch)
            theirs = db.outputs(engine, ids)
            db.set_status(engine, ids, 3)
            factory = make_session_factory(engine)
            for start in range(0, size, 50):
                generate_reports(UnitOfWork(factory), ids[start : start + 50])
            ours = db.outputs(engine, ids)
        finally:
            db.delete_bench_records(engine)
        differing = [rid for rid in ids if theirs[rid] != ours[rid] or ours[rid][0] != 4]
        if differing:
            rid = differing[0]
            raise RuntimeError(
                f"bench.sql_generate (batch {batch}) wrote other reports than the product for"
                f" {len(differing)} of {size} records; e.g. record {rid}: {theirs[rid]} vs {ours[rid]}"
            )
        output.log(
            f"  check: bench.sql_generate (batch {batch}) writes what the product writes ({size} records)"
        )


def plan(args: Any) -> dict[str, Shape]:
    """Each mode of a round, by name, with its processes × threads (and report batch size)."""
    shapes: dict[str, Shape] = {}
    for mode in args.modes:
        if mode == "pipeline" and args.worker_shapes:
            pipelines = {
                f"pipeline {p}x{t}" + ("" if b is None else f"b{b}"): (p, t, b)
                for p, t, b in args.worker_shapes
            }
        else:
            pipelines = {mode: (args.processes, args.threads, None)}
        if mode == "pipeline" and args.base:
            pipelines = {**{f"base {name}": shape for name, shape in pipelines.items()}, **pipelines}
        shapes.update(pipelines)
    return shapes


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.generation_limit", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--n", type=int, default=2000, help="records per run (default 2000)")
    parser.add_argument("--runs", type=int, default=3, help="rounds, each mode once per round (default 3)")
    parser.add_argument("--processes", type=int, default=2, help="processes of every mode (default 2)")
    parser.add_argument("--threads", type=int, default=8, help="threads per process (default 8)")
    parser.add_argument("--batch", type=int, default=100, help="records per transaction of sql100")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--worker-shapes",
        nargs="+",
        type=_shape,
        default=[],
        metavar="PxT[bB]",
        help="run the pipeline with each of these worker shapes (default: --processes × --threads)",
    )
    parser.add_argument(
        "--base",
        type=Path,
        metavar="DIR",
        help="also run the pipeline from the code in DIR (an export of another commit), side by side",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: --n 40 --runs 1")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.quick:
        args.n, args.runs = 40, 1
    redis_url, database_url = stores.redis_url(), stores.database_url()
    output.log(
        f"bench.generation_limit: n={args.n} runs={args.runs} {args.processes}×{args.threads}"
        f" modes={args.modes} batch={args.batch}"
    )
    engine = db.prepare(database_url)
    shapes = plan(args)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in shapes}
    try:
        if any("pipeline" not in mode for mode in shapes):
            check_baselines(engine, database_url, args)
        for round_no in range(1, args.runs + 1):
            for mode, shape in shapes.items():
                stores.delete_own_keys(stores.redis_client(redis_url))
                ids = db.insert_records(engine, args.n, status=3)
                try:
                    if "pipeline" in mode:
                        cwd = args.base if mode.startswith("base ") else ROOT
                        run = run_pipeline(engine, redis_url, database_url, ids, shape, cwd=cwd)
                    else:
                        batch = args.batch if mode == "sql100" else 1
                        run = run_sql(engine, database_url, ids, args, batch=batch)
                finally:
                    db.delete_bench_records(engine)
                run["reports_per_s"] = args.n / run["seconds"]
                run["loadavg"] = list(psutil.getloadavg())
                runs[mode].append(run)
                note = f", mean group {run['mean_group']:.1f}" if run.get("mean_group") else ""
                output.log(
                    f"  round {round_no} {mode}: {run['reports_per_s']:,.0f} reports/s"
                    f" (client CPU {run['client_cpu_s']:.2f} s, PostgreSQL {run['pg_cpu_s']:.2f} s{note})"
                )
    finally:
        db.delete_bench_records(engine)
        engine.dispose()

    base_mode = "sql" if "sql" in runs else next(iter(runs))
    base = stats.median([r["reports_per_s"] for r in runs[base_mode]])
    summary: dict[str, dict[str, float]] = {}
    rows = []
    for mode, mode_runs in runs.items():
        rate = stats.median([r["reports_per_s"] for r in mode_runs])
        client_ms = stats.median([1000 * r["client_cpu_s"] / args.n for r in mode_runs])
        pg_ms = stats.median([1000 * r["pg_cpu_s"] / args.n for r in mode_runs])
        share = stats.median([r["pg_cpu_s"] / (r["pg_cpu_s"] + r["client_cpu_s"]) for r in mode_runs])
        groups = [r["mean_group"] for r in mode_runs if r.get("mean_group")]
        # The sql modes' transaction size is fixed: 1, or --batch.
        mean_group = stats.median(groups) if groups else float(args.batch if mode == "sql100" else 1)
        summary[mode] = {
            "reports_per_s": rate,
            "vs_sql": stats.ratio(rate, base),
            "client_cpu_ms_per_report": client_ms,
            "pg_cpu_ms_per_report": pg_ms,
            "pg_cpu_share": share,
            "records_per_transaction": mean_group,
        }
        rows.append(
            [
                mode,
                rate,
                stats.ratio(rate, base),
                client_ms,
                pg_ms,
                f"{100 * share:.0f} %",
                f"{mean_group:.1f}",
            ]
        )
    table = output.print_table(
        f"Report generation, {args.n} records, {args.processes} processes × {args.threads} threads"
        " (a pipeline PxT: its worker shape),"
        f" median of {args.runs} interleaved rounds",
        [
            "mode",
            "reports/s",
            f"vs {base_mode}",
            "client CPU ms/report",
            "PostgreSQL CPU ms/report",
            "PostgreSQL share",
            "records/transaction",
        ],
        rows,
    )
    round_rows = [
        [i + 1, *(f"{runs[m][i]['reports_per_s'] / runs[base_mode][i]['reports_per_s']:.2f}" for m in runs)]
        for i in range(args.runs)
    ]
    round_table = output.print_table(f"Ratio to {base_mode} within each round", ["round", *runs], round_rows)
    data = {
        "params": vars(args),
        "machine": output.machine_info(stores.redis_client(redis_url)),
        "runs": runs,
        "summary": summary,
        "tables": [table, round_table],
    }
    output.write_results("generation_limit", data)
    return data


def _shape(value: str) -> Shape:
    processes, _, rest = value.lower().partition("x")
    threads, _, batch = rest.partition("b")
    try:
        shape = int(processes), int(threads), (int(batch) if batch else None)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a worker shape is PROCESSESxTHREADS[bBATCH], e.g. 2x8 or 2x64b1; got {value!r}"
        ) from None
    if min(shape[0], shape[1], shape[2] or 1) < 1:
        raise argparse.ArgumentTypeError(
            f"a worker shape needs at least 1 process, 1 thread and a batch of 1; got {value!r}"
        )
    return shape


if __name__ == "__main__":
    main()
