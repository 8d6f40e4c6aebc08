"""The web tier against a lean baseline, per submission.

    python -m bench.web_tier [--clients 16] [--duration 30] [--rounds 3] [--base DIR] [--flask-floor]
                             [--quick]

A submission is the three calls a user makes: createRecord, startAssessment and
submitAnswers with the 40 answers. Two servers run side by side on the same PostgreSQL and
on a private Redis (so its CPU is this benchmark's alone):

- **product**: the Procfile's web line (as it ships: 2 workers × 64 threads, the project's
  gunicorn worker class and logger);
- **baseline**: bench/web_baseline.py, a minimal WSGI app doing the same writes and LPUSHes by
  hand, under gunicorn with the same settings (workers, threads, keep-alive, access log);
- **product-base** (with `--base DIR`): the web line of another tree (an export of another
  commit), at that tree's own shape, for before and after in one run;
- **baseline-flask** (with `--flask-floor`): the baseline's handlers reached through Flask
  (bench/web_baseline_flask.py), under the baseline's gunicorn settings: the framework's floor.

Before measuring, one submission through each side must leave the same record, answers,
events and job (`checks` in the result).

The Procfile's hotpath process runs throughout (both sides' events go to `eventlog:queue`).
In each round each side gets `--clients` closed-loop clients (a keep-alive connection each)
for `--duration` seconds, sides interleaved, order alternating from round to round, after an
unmeasured warm-up of each. Measured
per side and round: submissions/s, p50/p99 of a whole submission (the three calls), and CPU
seconds per submission of the web server's processes, of PostgreSQL's backends serving the
database, of Redis and of the hot path (psutil, /proc). The load generator runs on the same
machine: its CPU is reported too.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from bench import ROOT, cpu, db, launch, output, stats, stores
from scripts import procfile_supervisor
from scripts.processes import ProcfileProcess, procfile_command, wait_until

#: The product's web line from another tree (`--base`), measured beside the others.
BASE_SIDE = "product-base"
#: The lean baseline's handlers under Flask (`--flask-floor`): the framework's own floor.
FLASK_SIDE = "baseline-flask"


@dataclass
class Tally:
    latencies_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def procfile_shape(tree: Path = ROOT) -> dict[str, str]:
    """The web line's default WEB_CONCURRENCY and WEB_THREADS in `tree`'s Procfile."""
    line = dict(procfile_supervisor.procfile_entries(tree / "Procfile"))["web"]
    shape = {}
    for variable in ("WEB_CONCURRENCY", "WEB_THREADS"):
        found = re.search(r"\$\{" + variable + r":-(\d+)\}", line)
        if found is None:
            raise RuntimeError(f"{tree / 'Procfile'}: no default for {variable} in the web line")
        shape[variable] = found.group(1)
    return shape


def start_product(env: dict[str, str], tree: Path = ROOT) -> tuple[launch.Service, int]:
    """The Procfile's web line of `tree` (this one, or an export of another commit)."""
    port = launch.free_port()
    argv, full_env = procfile_command(
        "web", {**os.environ, **env, "PORT": str(port)}, procfile=tree / "Procfile"
    )
    service = launch.Service("web-product", argv, full_env, cwd=tree)
    launch.wait_for_http(service, port, "/api/assessment/createRecord")
    return service, port


def start_baseline(env: dict[str, str], app: str = "bench.web_baseline:app") -> tuple[launch.Service, int]:
    """The baseline (or `app`) under gunicorn with the web line's settings but for the project's
    own worker class and logger (`gthread`, gunicorn's default logger)."""
    port = launch.free_port()
    argv = [
        sys.executable,
        "-m",
        "gunicorn",
        app,
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        env["WEB_CONCURRENCY"],
        "--worker-class",
        "gthread",
        "--threads",
        env["WEB_THREADS"],
        "--keep-alive",
        "5",
        "--access-logfile",
        "-",
        "--graceful-timeout",
        "30",
        "--no-control-socket",
    ]
    name = app.partition(":")[0].rpartition(".")[2]
    service = launch.Service(f"web-{name}", argv, {**os.environ, **env})
    launch.wait_for_http(service, port, "/api/assessment/createRecord")
    return service, port


def _call(conn: http.client.HTTPConnection, path: str, body: dict[str, Any], token: str) -> dict[str, Any]:
    conn.request(
        "POST",
        path,
        body=json.dumps(body),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    response = conn.getresponse()
    payload = json.loads(response.read() or b"{}")
    if response.status != 200 or payload.get("code") != 0:
        raise RuntimeError(f"{path}: HTTP {response.status} {str(payload)[:200]}")
    return dict(payload.get("data") or {})


def run_side(
    port: int, clients: int, duration_s: float, answers: list[dict[str, int]]
) -> tuple[Tally, float]:
    """`clients` closed-loop clients for `duration_s`; the tally and the elapsed seconds."""
    from web.auth import issue_user_token

    tally = Tally()
    deadline = time.monotonic() + duration_s

    def client(index: int) -> None:
        token = issue_user_token(launch.BENCH_SECRET, stores.BENCH_USER_BASE + index)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            while time.monotonic() < deadline:
                began = time.perf_counter()
                try:
                    record = _call(conn, "/api/assessment/createRecord", {}, token)
                    _call(conn, "/api/assessment/startAssessment", {"recordId": record["id"]}, token)
                    _call(
                        conn,
                        "/api/assessment/submitAnswers",
                        {"recordId": record["id"], "answers": answers},
                        token,
                    )
                except (OSError, http.client.HTTPException, RuntimeError) as exc:
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    with tally.lock:
                        tally.errors.append(str(exc)[:200])
                    continue
                elapsed = time.perf_counter() - began
                with tally.lock:
                    tally.latencies_s.append(elapsed)
        finally:
            conn.close()

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return tally, time.monotonic() - started


def events_stored(client: Any) -> bool:
    """Has the hot path stored every event sent so far? Its queue is empty and so is the batch
    it is inserting (`eventlog:backup`: taken from the queue, not yet committed)."""
    return int(client.llen("eventlog:queue")) + int(client.llen("eventlog:backup")) == 0


def written(engine: Engine, client: Any, port: int, answers: list[dict[str, int]]) -> dict[str, Any]:
    """One submission through a server, and what it left: the record, its answers, its events
    (once the hot path stored them) and its job. The two sides must leave the same."""
    from web.auth import issue_user_token

    token = issue_user_token(launch.BENCH_SECRET, stores.BENCH_USER_BASE)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        created = _call(conn, "/api/assessment/createRecord", {}, token)
        _call(conn, "/api/assessment/startAssessment", {"recordId": created["id"]}, token)
        _call(conn, "/api/assessment/submitAnswers", {"recordId": created["id"], "answers": answers}, token)
    finally:
        conn.close()
    wait_until(lambda: events_stored(client), timeout=60, what="the hot path", interval=0.1)
    jobs = [json.loads(raw) for raw in client.lrange("report:queue", 0, -1)]
    with engine.connect() as db_conn:
        record = db_conn.execute(
            text(
                "SELECT id, status, answered_count, started_at IS NOT NULL, submitted_at IS NOT NULL"
                " FROM assessment_records WHERE user_id >= :base"
            ),
            {"base": stores.BENCH_USER_BASE},
        ).one()
        stored: dict[int, int] = dict(
            db_conn.execute(
                text("SELECT question_id, value FROM answers WHERE record_id = :id"), {"id": record.id}
            ).all()
        )
        events = sorted(
            db_conn.scalars(text("SELECT event_type FROM event_log WHERE record_id = :id"), {"id": record.id})
        )
    return {
        "status": record.status,
        "answered_count": record.answered_count,
        "started": record[3],
        "submitted": record[4],
        "answers_match": stored == {a["questionId"]: a["value"] for a in answers},
        "events": events,
        "jobs": [(job["RecordId"] == record.id, job["RetryCount"]) for job in jobs],
    }


def _settle(client: Any, engine: Engine) -> None:
    """Wait for the hot path to have taken the round's events, then drop the round's rows and jobs."""
    wait_until(lambda: events_stored(client), timeout=120, what="the hot path", interval=0.2)
    client.delete("report:queue")
    db.delete_bench_records(engine)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM event_log WHERE user_id >= :base"), {"base": stores.BENCH_USER_BASE})


def measure(
    side: str,
    *,
    port: int,
    web: launch.Service,
    hotpath: ProcfileProcess,
    engine: Engine,
    client: Any,
    args: argparse.Namespace,
    answers: list[dict[str, int]],
) -> dict[str, Any]:
    web_before, pg_before, redis_before = (
        cpu.tree_cpu(web.pid),
        cpu.backend_cpu(engine),
        cpu.redis_cpu(client),
    )
    hot_before, me_before = cpu.tree_cpu(hotpath.pid), time.process_time()
    busy_before = cpu.machine_busy()
    load = os.getloadavg()[0]
    tally, elapsed = run_side(port, args.clients, args.duration, answers)
    # The events of the round are the hot path's work: wait until it took them.
    wait_until(lambda: events_stored(client), timeout=120, what="the hot path", interval=0.1)
    n = len(tally.latencies_s)
    if tally.errors:
        output.log(f"  {side}: {len(tally.errors)} failed submissions, e.g. {tally.errors[:2]}")
    busy_after = cpu.machine_busy()
    per = 1000.0 / max(n, 1)
    row = {
        "side": side,
        "submissions": n,
        "errors": len(tally.errors),
        "per_s": n / elapsed,
        "p50_ms": stats.percentile(tally.latencies_s, 50) * 1000 if n else 0.0,
        "p99_ms": stats.percentile(tally.latencies_s, 99) * 1000 if n else 0.0,
        "web_cpu_ms": (cpu.tree_cpu(web.pid) - web_before) * per,
        "pg_cpu_ms": cpu.cpu_delta(pg_before, cpu.backend_cpu(engine)) * per,
        "redis_cpu_ms": (cpu.redis_cpu(client) - redis_before) * per,
        "hotpath_cpu_ms": (cpu.tree_cpu(hotpath.pid) - hot_before) * per,
        "client_cpu_ms": (time.process_time() - me_before) * per,
        "machine_busy": (busy_after[0] - busy_before[0]) / max(busy_after[1] - busy_before[1], 1e-9),
        "load_avg": load,
    }
    _settle(client, engine)
    return row


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.web_tier", description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=16, help="closed-loop clients per side (default 16)")
    parser.add_argument(
        "--duration", type=float, default=30.0, help="seconds per side and round (default 30)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: 2 clients, 0.5 s, 1 round")
    parser.add_argument(
        "--threads",
        type=int,
        help="threads per web worker process, every side (default: each product side its own"
        " Procfile's WEB_THREADS, the baselines this tree's)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        help="web worker processes, every side (default: each product side its own Procfile's"
        " WEB_CONCURRENCY, the baselines this tree's)",
    )
    parser.add_argument(
        "--base",
        type=Path,
        help="also run the web line of the code in DIR (`git archive <commit> | tar -x -C DIR`) as"
        " 'product-base', the same load in every round: before and after in one run",
    )
    parser.add_argument(
        "--flask-floor",
        action="store_true",
        help="also run the baseline's handlers under Flask (bench/web_baseline_flask.py) as"
        " 'baseline-flask': what the framework alone costs",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.quick:
        args.clients, args.duration, args.rounds = 2, 0.5, 1
    database_url = stores.database_url()
    engine = db.prepare(database_url)
    with engine.connect() as conn:
        questions = list(conn.scalars(text("SELECT id FROM questions WHERE is_active ORDER BY id")))
    answers = [{"questionId": q, "value": q * 7 % 5 + 1} for q in questions]
    rows: list[dict[str, Any]] = []
    with stores.private_redis() as redis_url:
        client = stores.redis_client(redis_url)
        # Given, the shape is every side's; else each product side runs its Procfile's as it
        # ships, and the baselines this tree's.
        shape = {
            name: str(value)
            for name, value in (("WEB_CONCURRENCY", args.workers), ("WEB_THREADS", args.threads))
            if value is not None
        }
        env = {**launch.stack_env(redis_url, database_url), **shape, "PYTHONUNBUFFERED": "1"}
        trees = {"product": ROOT} | ({BASE_SIDE: args.base.resolve()} if args.base else {})
        shapes = {side: procfile_shape(tree) | shape for side, tree in trees.items()}
        shapes["baselines"] = procfile_shape() | shape
        lean_env = env | shapes["baselines"]
        output.log(
            f"bench.web_tier: {args.clients} clients × {args.duration:g} s × {args.rounds} rounds per side,"
            " web processes × threads: "
            + ", ".join(f"{side} {s['WEB_CONCURRENCY']} × {s['WEB_THREADS']}" for side, s in shapes.items())
        )
        log = Path(tempfile.mkstemp(prefix="mi-bench-hotpath-", suffix=".log")[1])
        hotpath = ProcfileProcess("hotpath", env={**os.environ, **env}, log_path=log)
        servers: dict[str, tuple[launch.Service, int]] = {}
        checks: dict[str, dict[str, Any]] = {}
        try:
            servers["product"] = start_product(env)
            servers["baseline"] = start_baseline(lean_env)
            if args.base:
                servers[BASE_SIDE] = start_product(env, args.base.resolve())
            if args.flask_floor:
                servers[FLASK_SIDE] = start_baseline(lean_env, "bench.web_baseline_flask:app")
            sides = tuple(servers)
            # Unmeasured: each server's first requests import and connect lazily, and so does
            # the client (the token signer).
            for side in sides:
                run_side(servers[side][1], args.clients, min(5.0, args.duration), answers)
                _settle(client, engine)
            # Both sides do the same work: one submission each, and what it left compared.
            for side in sides:
                checks[side] = written(engine, client, servers[side][1], answers)
                _settle(client, engine)
            if any(checks[side] != checks["product"] for side in sides):
                raise RuntimeError(f"the sides do not write the same: {checks}")
            for number in range(args.rounds):
                order = sides if number % 2 == 0 else tuple(reversed(sides))
                for side in order:
                    web, port = servers[side]
                    row = measure(
                        side,
                        port=port,
                        web=web,
                        hotpath=hotpath,
                        engine=engine,
                        client=client,
                        args=args,
                        answers=answers,
                    )
                    row["round"] = number + 1
                    rows.append(row)
                    output.log(
                        f"  round {number + 1} {side}: {row['per_s']:.1f}/s, p99 {row['p99_ms']:.1f} ms,"
                        f" web {row['web_cpu_ms']:.2f} ms CPU/submission"
                    )
        finally:
            for web, _ in servers.values():
                web.stop()
            hotpath.stop()
            log.unlink(missing_ok=True)
            db.delete_bench_records(engine)
    result = {**summarize(rows, args), "checks": checks, "shapes": shapes}
    output.write_results("web_tier", result)
    return result


def summarize(rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    keys = (
        "per_s",
        "p50_ms",
        "p99_ms",
        "web_cpu_ms",
        "pg_cpu_ms",
        "redis_cpu_ms",
        "hotpath_cpu_ms",
        "client_cpu_ms",
    )
    sides = list(dict.fromkeys(r["side"] for r in rows))
    medians = {
        side: {k: stats.median([r[k] for r in rows if r["side"] == side]) for k in keys} for side in sides
    }
    rounds = sorted({r["round"] for r in rows})
    by = {(r["round"], r["side"]): r for r in rows}

    def ratio(n: int, side: str, other: str, key: str) -> float:
        return stats.ratio(by[(n, side)][key], by[(n, other)][key])

    ratios = [
        {
            "round": n,
            "rate": ratio(n, "product", "baseline", "per_s"),
            "web_cpu": ratio(n, "product", "baseline", "web_cpu_ms"),
            **(
                {
                    "rate_vs_base": ratio(n, "product", BASE_SIDE, "per_s"),
                    "web_cpu_vs_base": ratio(n, "product", BASE_SIDE, "web_cpu_ms"),
                }
                if BASE_SIDE in sides
                else {}
            ),
            **(
                {
                    "flask_floor": ratio(n, FLASK_SIDE, "baseline", "per_s"),
                    "rate_vs_flask": ratio(n, "product", FLASK_SIDE, "per_s"),
                }
                if FLASK_SIDE in sides
                else {}
            ),
        }
        for n in rounds
    ]
    table_rows = [
        [side, *(medians[side][k] for k in keys), " / ".join(f"{by[(n, side)]['per_s']:.0f}" for n in rounds)]
        for side in sides
    ]
    table = output.print_table(
        "Web tier per submission (createRecord + startAssessment + submitAnswers of 40),"
        f" {args.clients} clients, {args.duration:g} s × {args.rounds} rounds (medians of rounds)",
        [
            "side",
            "subm/s",
            "p50 ms",
            "p99 ms",
            "web CPU ms",
            "PG CPU ms",
            "Redis CPU ms",
            "hotpath CPU ms",
            "client CPU ms",
            "subm/s per round",
        ],
        table_rows,
    )
    columns = [
        k
        for k in ("rate", "web_cpu", "rate_vs_base", "web_cpu_vs_base", "flask_floor", "rate_vs_flask")
        if k in ratios[0]
    ]
    ratio_table = output.print_table(
        "product / baseline (and product / product-base; flask_floor: baseline-flask / baseline,"
        " rate_vs_flask: product / baseline-flask), per round",
        ["round", *columns],
        [[r["round"], *(r[k] for k in columns)] for r in ratios]
        + [["median", *(stats.median([r[k] for r in ratios]) for k in columns)]],
    )
    return {"rows": rows, "medians": medians, "ratios": ratios, "tables": [table, ratio_table]}


if __name__ == "__main__":
    main()
