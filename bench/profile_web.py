"""Where the web line's processes spend the interpreter while they take submissions (py-spy).

    python -m bench.profile_web [--clients 16] [--duration 20] [--rate 200] [--tree DIR] [--quick]

The Procfile's web line (its shape as it ships) takes closed-loop submissions
(createRecord + startAssessment + submitAnswers of the 40 answers, bench/web_tier.py's
clients) while `py-spy record --gil --threads --format raw` samples one of its workers.
Each sample of the thread holding the GIL is assigned to the innermost frame of a known
package, as in bench/profile_worker.py: shares, not times. The hot path runs beside it
(the events it is sent must be taken), on a private Redis.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench import ROOT, db, launch, output, stores, web_tier
from bench.profile_worker import shares, start_spy, worker_child
from scripts.processes import ProcfileProcess

#: Innermost-frame buckets of a web worker, first match wins (see bench/profile_worker.py).
WEB_BUCKETS: tuple[tuple[str, str], ...] = (
    ("sqlalchemy/", "SQLAlchemy"),
    ("psycopg/", "psycopg's Python layer"),
    ("psycopg_pool/", "psycopg's Python layer"),
    ("redis/", "redis-py"),
    ("flask/", "Flask / Werkzeug"),
    ("werkzeug/", "Flask / Werkzeug"),
    ("gunicorn/", "gunicorn"),
    ("pydantic", "pydantic"),
    ("itsdangerous/", "auth (itsdangerous, hmac)"),
    ("hmac", "auth (itsdangerous, hmac)"),
    ("web/", "web tier (web/)"),
    ("redis_adapters/", "Redis adapters (redis_adapters/)"),
    ("observability/", "observability (observability/)"),
    ("services/", "service code (services/)"),
    ("prometheus_client/", "prometheus_client"),
    ("logging/", "logging"),
    ("pythonjsonlogger/", "logging"),
    ("json/", "json / uuid / datetime"),
    ("uuid", "json / uuid / datetime"),
    ("datetime", "json / uuid / datetime"),
    ("threading", "threading (locks, conditions)"),
    ("selectors", "sockets / selectors"),
    ("socket", "sockets / selectors"),
    ("ssl", "sockets / selectors"),
)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_web", description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=16, help="closed-loop clients (default 16)")
    parser.add_argument(
        "--duration", type=float, default=20.0, help="seconds sampled, under load throughout (default 20)"
    )
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second (default 200)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: 2 clients, 3 s")
    parser.add_argument("--raw", type=Path, help="also keep py-spy's collapsed stacks in this file")
    parser.add_argument(
        "--tree",
        type=Path,
        help="profile the web line of the code in DIR (`git archive <commit> | tar -x -C DIR`)",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.quick:
        args.clients, args.duration = 2, 3.0
    database_url = stores.database_url()
    engine = db.prepare(database_url)
    with engine.connect() as conn:
        questions = list(conn.scalars(text("SELECT id FROM questions WHERE is_active ORDER BY id")))
    answers = [{"questionId": q, "value": q * 7 % 5 + 1} for q in questions]
    out = Path(tempfile.mkdtemp(prefix="mi-profile-web-")) / "profile.txt"
    with stores.private_redis() as redis_url:
        env = {
            **launch.stack_env(redis_url, database_url),
            "PYTHONUNBUFFERED": "1",
        }
        log = Path(tempfile.mkstemp(prefix="mi-bench-hotpath-", suffix=".log")[1])
        hotpath = ProcfileProcess("hotpath", env={**os.environ, **env}, log_path=log)
        tree = args.tree.resolve() if args.tree else ROOT
        web, port = web_tier.start_product(env, tree)
        try:
            web_tier.run_side(port, args.clients, min(3.0, args.duration), answers)  # warm-up
            # py-spy's own clock: it samples that long once attached (attaching may take seconds
            # on a loaded machine) and writes its file; the load runs until then.
            spy = start_spy(
                worker_child(web.pid), out, rate=args.rate, duration_s=max(1, round(args.duration))
            )
            tally, elapsed = web_tier.Tally(), 0.0
            deadline = time.monotonic() + args.duration + 60
            try:
                while spy.poll() is None and time.monotonic() < deadline:
                    part, seconds = web_tier.run_side(port, args.clients, 1.0, answers)
                    tally.latencies_s += part.latencies_s
                    tally.errors += part.errors
                    elapsed += seconds
            finally:
                if spy.poll() is None:
                    spy.send_signal(2)  # SIGINT: py-spy writes what it has and exits
                _, errors = spy.communicate(timeout=60)
        finally:
            web.stop()
            hotpath.stop()
            log.unlink(missing_ok=True)
            db.delete_bench_records(engine)
    raw = out.read_text() if out.exists() else ""
    if args.raw:
        args.raw.write_text(raw)
    table, total = shares(raw, WEB_BUCKETS)
    if not total:
        raise RuntimeError(f"py-spy recorded nothing: {errors[-1000:]}")
    n = len(tally.latencies_s)
    output.log(
        f"bench.profile_web: {n} submissions in {elapsed:.1f} s ({len(tally.errors)} failed),"
        f" {total} samples of one web worker's thread holding the GIL"
    )
    table_text = output.print_table(
        f"Web worker profile: {n} submissions, {args.clients} clients,"
        f" {total} GIL samples of one of {web_tier.procfile_shape(tree)['WEB_CONCURRENCY']} workers",
        ["where (innermost known frame)", "share"],
        [[name, f"{share:.1%}"] for name, share in table.items()],
    )
    data: dict[str, Any] = {
        "submissions": n,
        "seconds": elapsed,
        "samples": total,
        "shares": table,
        "tables": [table_text],
    }
    output.write_results("profile_web", data)
    return data


if __name__ == "__main__":
    main()
