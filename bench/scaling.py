"""The scaling curve, 1 to 8 worker processes, and what saturates.

    python -m bench.scaling [--processes 1 2 4 8] [--threads 8] [--noop-n 20000]
                            [--reports-n 1000] [--runs 2] [--netns] [--postgres test|private]

For each worker process count P (threads per process fixed, the Procfile's 8), the
worker `dramatiq bench.workers.noop` (the Procfile's worker plus a no-op actor on a queue
of its own) is started and ready, then two measurements are taken on it:

- **no-op**: N messages of the no-op actor enqueued in batches of 1000 (`enqueue_many`);
  msg/s timed from the first LPUSH until the queue's figures show nothing queued or in
  flight (polled every 20 ms);
- **reports**: N records in status 3 with full answers, their jobs LPUSHed at once by the
  real producer (`RedisReportQueue.enqueue_many`); reports/s timed from the LPUSH until all
  are in status 4 (polled every 20 ms), the real actor writing to the real PostgreSQL.

During each timed section: CPU seconds of the worker processes (their process trees), of
Redis (`INFO cpu` of a redis-server this benchmark starts, so all of it is ours), of the
PostgreSQL backends serving the benchmark's database (pg_stat_activity + psutil, as
bench.generation_limit), and of the whole machine (busy / all cores). What saturated: Redis
at >= 90 % of one core (it runs commands on one thread), or the machine's cores >= 90 %
busy (then the largest consumer is named), else nothing (the run was latency-bound).

`--netns` adds the mode `netns`: each worker process runs on a "host" of its own, a
network namespace reaching Redis and PostgreSQL over a veth pair and a bridge
(bench/netns.py), as `dramatiq ... --processes 1` under a hostname of its own. It needs a
PostgreSQL listening on the bridge, so it implies `--postgres private` (a throw-away
cluster, fsync off, started here). The modes are interleaved round by round.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil  # type: ignore[import-untyped]
import redis
from sqlalchemy import Engine

from bench import cpu, db, launch, netns, output, stats, stores
from bench.workers import NOOP_ACTOR, NOOP_QUEUE

MODES = ("local", "netns")
WORKER_MODULE = "bench.workers.noop"
#: The worker consumes two queues per process: the report queue and the no-op queue.
QUEUES_PER_PROCESS = 2
BATCH = 1000
POLL_S = 0.02
#: A server at this share of one core, or the machine's cores this busy, is saturated.
SATURATED = 0.9
PRIVATE_DATABASE = "mi_scaling"


@dataclass
class Servers:
    """Where this process reaches the servers, and where the workers do (another address
    from a network namespace)."""

    redis_url: str
    database_url: str
    worker_urls: dict[str, dict[str, str]] = field(default_factory=dict)  # mode -> env


def _on(url: str, address: str) -> str:
    return url.replace("@127.0.0.1:", f"@{address}:").replace("//127.0.0.1:", f"//{address}:")


@contextlib.contextmanager
def servers(postgres: str, hosts: netns.Hosts | None) -> Iterator[Servers]:
    """A private Redis (its CPU is ours alone) and the test PostgreSQL or a private one,
    bound to the hosts' bridge as well when there are hosts."""
    bind = ("127.0.0.1", hosts.server_address) if hosts else ("127.0.0.1",)
    clients = (hosts.network,) if hosts else ()
    with (
        stores.private_redis(bind=bind) as redis_url,
        _postgres(postgres, bind, clients) as database_url,
    ):
        found = Servers(redis_url, database_url)
        found.worker_urls["local"] = {"REDIS_URL": redis_url, "DATABASE_URL": database_url}
        if hosts:
            found.worker_urls["netns"] = {
                "REDIS_URL": _on(redis_url, hosts.server_address),
                "DATABASE_URL": _on(database_url, hosts.server_address),
            }
        yield found


@contextlib.contextmanager
def _postgres(kind: str, listen: tuple[str, ...], clients: tuple[str, ...]) -> Iterator[str]:
    if kind == "test":
        yield stores.database_url()
        return
    from scripts import servers as harness

    with harness.temporary_directory("mi-bench-pg-") as tmp:
        server = harness.PostgresServer(tmp, listen=listen, clients=clients).start()
        try:
            harness.ensure_database(server.admin_url, PRIVATE_DATABASE)
            yield server.url(PRIVATE_DATABASE)
        finally:
            server.stop()


def start_workers(
    mode: str, found: Servers, hosts: Sequence[str], processes: int, threads: int
) -> list[launch.Service]:
    """`local`: one `dramatiq --processes P` (the Procfile's shape); `netns`: P hosts,
    each running `dramatiq --processes 1`."""
    env = found.worker_urls[mode]
    common: dict[str, Any] = {"module": WORKER_MODULE, "threads": threads, "queues": QUEUES_PER_PROCESS}
    if mode == "local":
        return [launch.start_worker(found.redis_url, found.database_url, processes=processes, **common)]
    started: list[launch.Service] = []
    try:
        for index, name in enumerate(hosts[:processes], start=1):
            via = netns.run_as(name, f"scaling-host-{index}")
            started.append(
                launch.start_worker(found.redis_url, found.database_url, env=env, via=via, **common)
            )
    except BaseException:
        for service in started:
            service.stop(graceful=False)
        raise
    return started


class Meter:
    """CPU seconds of the workers, Redis, the PostgreSQL backends and the machine over a
    timed section."""

    def __init__(self, workers: Sequence[launch.Service], client: redis.Redis, engine: Engine) -> None:
        self.workers, self.client, self.engine = workers, client, engine

    def _sample(self) -> dict[str, Any]:
        busy, total = cpu.machine_busy()
        return {
            "time": time.perf_counter(),
            "workers": sum(cpu.tree_cpu(w.pid) for w in self.workers),
            "redis": cpu.redis_cpu(self.client),
            "postgres": cpu.backend_cpu(self.engine),
            "bench": time.process_time(),
            "busy": busy,
            "total": total,
        }

    @contextlib.contextmanager
    def timed(self) -> Iterator[dict[str, Any]]:
        """Yields a dict filled, once the block ends, with seconds and CPU seconds."""
        result: dict[str, Any] = {}
        before = self._sample()
        yield result
        after = self._sample()
        result["seconds"] = after["time"] - before["time"]
        result["cpu_s"] = {
            "workers": after["workers"] - before["workers"],
            "redis": after["redis"] - before["redis"],
            "postgres": cpu.cpu_delta(before["postgres"], after["postgres"]),
            "bench": after["bench"] - before["bench"],
        }
        busy, total = after["busy"] - before["busy"], after["total"] - before["total"]
        result["machine_busy"] = min(1.0, busy / max(1e-9, total))  # 1 + rounding when all busy
        # Busy CPU seconds of everything else on the machine: the other jobs sharing it.
        result["cpu_s"]["others"] = max(0.0, busy - sum(result["cpu_s"].values()))


def _wait(done: Callable[[], bool], workers: Sequence[launch.Service], timeout: float, what: str) -> None:
    deadline = time.perf_counter() + timeout
    while not done():
        for worker in workers:
            if not worker.alive():
                raise RuntimeError(f"a worker died during {what}:\n{worker.output()[-2000:]}")
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{what} not done in {timeout:.0f} s")
        time.sleep(POLL_S)


def noop_run(meter: Meter, client: redis.Redis, n: int) -> dict[str, Any]:
    """N no-op messages through our broker: enqueued in batches, drained by the workers."""
    import dramatiq
    from listbroker import RedisListBroker, queue_figures

    from actors.bootstrap import default_middleware

    broker = RedisListBroker(client=client, middleware=default_middleware())
    actor: Any = dramatiq.actor(broker=broker, queue_name=NOOP_QUEUE, actor_name=NOOP_ACTOR, max_retries=0)(
        _noop
    )
    try:
        with meter.timed() as result:
            for first in range(0, n, BATCH):
                broker.enqueue_many([actor.message() for _ in range(min(BATCH, n - first))])
            _wait(
                lambda: queue_figures(client, NOOP_QUEUE).pending == 0,
                meter.workers,
                max(120, n / 20),
                "no-op",
            )
    finally:
        broker.flush(NOOP_QUEUE)
    return result


def _noop() -> None:
    """The parent's declaration of the no-op actor, to build its messages."""


def reports_run(meter: Meter, engine: Engine, client: redis.Redis, n: int) -> dict[str, Any]:
    """N real reports: records in status 3, one LPUSH of their jobs, until all in status 4."""
    from redis_adapters.report_queue import RedisReportQueue

    ids = db.insert_records(engine, n, status=3)
    try:
        with meter.timed() as result:
            RedisReportQueue(client).enqueue_many(ids)
            _wait(lambda: db.statuses(engine, ids).get(4, 0) >= n, meter.workers, max(120, n / 5), "reports")
    finally:
        db.delete_bench_records(engine)
    return result


def saturation(row: dict[str, float], nproc: int) -> str:
    """What saturated in a run: Redis's one core, the machine's cores (and whose), or nothing."""
    if row["redis_core"] >= SATURATED:
        return f"Redis ({100 * row['redis_core']:.0f} % of its one core)"
    if row["machine_busy"] >= SATURATED:
        return f"the {nproc} cores (other jobs: {100 * row['others_core']:.0f} % of a core)"
    return "nothing (latency-bound)"


def derive(run: dict[str, Any], n: int) -> dict[str, Any]:
    """Rates, CPU per message and shares of one core for a measured run."""
    seconds = run["seconds"]
    cpu_s = run["cpu_s"]
    out: dict[str, Any] = {"rate": n / seconds, "machine_busy": run["machine_busy"]}
    for part, value in cpu_s.items():
        out[f"{part}_ms_per_msg"] = 1000 * value / n
        out[f"{part}_core"] = value / seconds
    return out


def summarize(runs: list[dict[str, Any]], nproc: int) -> dict[str, Any]:
    """Medians per (mode, processes, kind), the saturation verdict, per-round ratios to 1 process."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["mode"], run["processes"], run["kind"]), []).append(run)
    rows: dict[str, Any] = {}
    for (mode, processes, kind), group in groups.items():
        keys = [k for k in group[0]["derived"] if isinstance(group[0]["derived"][k], float)]
        medians = {k: stats.median([g["derived"][k] for g in group]) for k in keys}
        medians["loadavg_1m"] = stats.median([g["loadavg"][0] for g in group])
        rows[f"{mode}/{processes}/{kind}"] = {**medians, "saturated": saturation(medians, nproc)}
    per_round: dict[str, list[float]] = {}
    by_key = {(r["mode"], r["processes"], r["kind"], r["round"]): r["derived"]["rate"] for r in runs}
    for (mode, processes, kind, round_no), rate in sorted(by_key.items()):
        base = by_key.get((mode, min(p for m, p, _, _ in by_key if m == mode), kind, round_no))
        if base:
            per_round.setdefault(f"{mode}/{processes}/{kind}", []).append(rate / base)
    return {"rows": rows, "per_round_vs_fewest": per_round}


def tables(summary: dict[str, Any], args: argparse.Namespace, modes: Sequence[str]) -> list[str]:
    rows = []
    for mode in modes:
        for processes in args.processes:
            noop = summary["rows"].get(f"{mode}/{processes}/noop")
            rep = summary["rows"].get(f"{mode}/{processes}/reports")
            if not noop or not rep:
                continue
            rows.append(
                [
                    mode,
                    f"{processes} × {args.threads}",
                    noop["rate"],
                    rep["rate"],
                    f"{100 * noop['workers_core']:.0f} / {100 * noop['redis_core']:.0f}",
                    f"{100 * rep['workers_core']:.0f} / {100 * rep['redis_core']:.0f}"
                    f" / {100 * rep['postgres_core']:.0f}",
                    f"{100 * noop['machine_busy']:.0f} / {100 * rep['machine_busy']:.0f}",
                    f"no-op: {noop['saturated']}; reports: {rep['saturated']}",
                    f"{noop['loadavg_1m']:.1f} / {rep['loadavg_1m']:.1f}",
                ]
            )
    curve = output.print_table(
        f"Scaling curve: no-op {args.noop_n} msgs, reports {args.reports_n} records, median of {args.runs}",
        [
            "mode",
            "processes × threads",
            "no-op msg/s",
            "reports/s",
            "no-op CPU, % of a core: workers / Redis",
            "reports CPU, % of a core: workers / Redis / PostgreSQL",
            "machine busy % (no-op / reports)",
            "saturated",
            "load avg 1 min (no-op / reports)",
        ],
        rows,
    )
    costs = []
    for mode in modes:
        for processes in args.processes:
            for kind in ("noop", "reports"):
                row = summary["rows"].get(f"{mode}/{processes}/{kind}")
                if row:
                    costs.append(
                        [
                            mode,
                            processes,
                            kind,
                            row["workers_ms_per_msg"],
                            row["redis_ms_per_msg"],
                            row["postgres_ms_per_msg"],
                            row["bench_ms_per_msg"],
                        ]
                    )
    cost = output.print_table(
        "CPU ms per message (no-op) / per report, median of runs",
        ["mode", "processes", "kind", "workers ms", "Redis ms", "PostgreSQL ms", "producer ms"],
        costs,
    )
    ratio_rows = [
        [key.replace("/", " · "), " / ".join(f"{v:.2f}" for v in values)]
        for key, values in summary["per_round_vs_fewest"].items()
    ]
    ratios = output.print_table(
        f"Rate vs {min(args.processes)} process(es), within each round",
        ["mode · processes · kind", "per round"],
        ratio_rows,
    )
    return [curve, cost, ratios]


def one_shape(
    mode: str,
    processes: int,
    *,
    found: Servers,
    hosts: Sequence[str],
    engine: Engine,
    client: redis.Redis,
    args: argparse.Namespace,
) -> list[dict[str, Any]]:
    """Start the workers of one mode and process count, take both measurements, stop them."""
    stores.delete_own_keys(client)
    workers = start_workers(mode, found, hosts, processes, args.threads)
    runs = []
    try:
        meter = Meter(workers, client, engine)
        for kind, n in (("noop", args.noop_n), ("reports", args.reports_n)):
            run = noop_run(meter, client, n) if kind == "noop" else reports_run(meter, engine, client, n)
            run.update(mode=mode, processes=processes, kind=kind, n=n, loadavg=list(psutil.getloadavg()))
            run["derived"] = d = derive(run, n)
            runs.append(run)
            output.log(
                f"  {mode} {processes}×{args.threads} {kind}: {d['rate']:,.0f}/s (CPU % of a core:"
                f" workers {100 * d['workers_core']:.0f}, Redis {100 * d['redis_core']:.0f},"
                f" PostgreSQL {100 * d['postgres_core']:.0f}; machine {100 * d['machine_busy']:.0f} %"
                f" busy; load {run['loadavg'][0]:.1f})"
            )
        # Where the workers say they run (their process beats: `worker:<host>:<pid>`).
        hosts_seen = sorted(worker_hosts(client))
        for run in runs:
            run["worker_hosts"] = hosts_seen
    finally:
        for worker in workers:
            worker.stop(graceful=False)
        stores.delete_own_keys(client)
    return runs


def worker_hosts(client: redis.Redis) -> set[str]:
    """The host names in the worker processes' beats (observability/liveness.py)."""
    from observability.liveness import live_processes

    return {beat.host for beat in live_processes(client) if beat.kind == "worker" and beat.alive}


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4, 8], help="default 1 2 4 8")
    parser.add_argument(
        "--threads", type=int, default=8, help="threads per process (default 8, the Procfile's)"
    )
    parser.add_argument("--noop-n", type=int, default=20_000, help="no-op messages per run (default 20000)")
    parser.add_argument("--reports-n", type=int, default=1000, help="reports per run (default 1000)")
    parser.add_argument("--runs", type=int, default=2, help="rounds (default 2)")
    parser.add_argument(
        "--netns", action="store_true", help="also run each worker process on a host of its own"
    )
    parser.add_argument(
        "--postgres",
        choices=("test", "private"),
        default="test",
        help="the test database (TEST_DATABASE_URL) or a private cluster (implied by --netns)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes: --processes 1 2 --noop-n 500 --reports-n 40 --runs 1",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.processes, args.noop_n, args.reports_n, args.runs = [1, 2], 500, 40, 1
    if args.netns:
        args.postgres = "private"
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse(sys.argv[1:] if argv is None else argv)
    nproc = os.cpu_count() or 1
    output.log(
        f"bench.scaling: processes={args.processes} threads={args.threads} noop_n={args.noop_n}"
        f" reports_n={args.reports_n} runs={args.runs} netns={args.netns} postgres={args.postgres}"
    )
    runs: list[dict[str, Any]] = []
    netns_error = None
    with contextlib.ExitStack() as stack:
        hosts: netns.Hosts | None = None
        if args.netns:
            try:
                hosts = stack.enter_context(netns.hosts(max(args.processes)))
            except netns.NamespaceError as exc:
                netns_error = str(exc)
                output.log(f"  no network namespaces, local mode only: {exc}")
        modes = ["local", "netns"] if hosts else ["local"]
        found = stack.enter_context(servers(args.postgres, hosts))
        client = stores.redis_client(found.redis_url)
        engine = db.prepare(found.database_url)
        stack.callback(engine.dispose)
        stack.callback(db.delete_bench_records, engine)
        machine = output.machine_info(client)
        for round_no in range(1, args.runs + 1):
            for processes in args.processes:
                for mode in modes:
                    for run in one_shape(
                        mode,
                        processes,
                        found=found,
                        hosts=hosts.names if hosts else [],
                        engine=engine,
                        client=client,
                        args=args,
                    ):
                        run["round"] = round_no
                        runs.append(run)
    summary = summarize(runs, nproc)
    data = {
        "params": vars(args),
        "machine": machine,
        "modes": modes,
        "netns_error": netns_error,
        "runs": runs,
        "summary": summary,
        "tables": tables(summary, args, modes),
    }
    output.write_results("scaling", data)
    return data


if __name__ == "__main__":
    main()
