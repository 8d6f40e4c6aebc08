"""The web app's own CPU per call of a submission, in one thread, this tree against another.

    python -m bench.web_inprocess [--tree DIR] [--baselines] [--pairs 6] [--n 300] [--quick]

`bench.web_tier` measures the Procfile's web line under 16 clients: gunicorn, 128 threads
and the GIL's hand-offs included, and its figures swing ±15 % between runs on this
machine. This one isolates the application: the app of a tree (`web.create_app()`), called
through werkzeug's test client (every side's: Flask's adds its context keeping) in a single
thread, `--n` submissions (createRecord, startAssessment, submitAnswers of the 40 answers)
after 30 unmeasured ones, against the same
PostgreSQL and a private Redis; the median thread CPU (`time.thread_time`) of each call.
Waiting for the servers costs no thread CPU, so what is measured is the Python path: Flask,
SpecTree, the services, SQLAlchemy, psycopg and redis-py. Each tree runs in a fresh
interpreter of its own (`cwd` and `sys.path` the tree), the trees alternating in pairs, the
order reversed every other pair; the ratio is taken per pair.

With `--baselines`, the lean WSGI app (bench/web_baseline.py) and its Flask twin
(bench/web_baseline_flask.py) run the same submissions through the same client as sides
of their own (this tree's), and each is compared with this tree per pair: what the application
costs in one thread against the leanest app doing the same writes, without gunicorn's threads
and the GIL's hand-offs that `bench.web_tier` adds to every side.

The hot path is not running: each submission leaves a job in the private Redis's
`report:queue` (and, for a tree that still LPUSHes a creation's and a start's events, two events
in `eventlog:queue`, far below its bound); the records are the benchmarks' own users' and are
deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Nothing of the project at the module's level: the child (`--child`) runs this file by its
# path in another tree, whose `web` it must import, not this one's.
CALLS = ("createRecord", "startAssessment", "submitAnswers")
WARM_UP = 30
PRODUCT = "product"
#: The baselines' modules (`--baselines`), each side's app their `app`.
BASELINES = {"baseline": "bench.web_baseline", "baseline-flask": "bench.web_baseline_flask"}


def child(n: int, app_name: str = PRODUCT) -> dict[str, float]:
    """Run in the tree's own interpreter (cwd = the tree): median CPU ms of each call of
    `app_name`'s app (the tree's `web.create_app()`, or a baseline's)."""
    import importlib
    import time

    # Run by its path: sys.path[0] is bench/, whose modules must not shadow the tree's.
    sys.path[0] = os.getcwd()
    from sqlalchemy import create_engine, text
    from werkzeug.test import Client

    from web.auth import issue_user_token

    if app_name == PRODUCT:
        from web import create_app

        client = Client(create_app())
    else:
        client = Client(importlib.import_module(BASELINES[app_name]).app)
    engine = create_engine(os.environ["DATABASE_URL"].replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as conn:
        questions = list(conn.scalars(text("SELECT id FROM questions WHERE is_active ORDER BY id")))
    engine.dispose()
    answers = [{"questionId": q, "value": q * 7 % 5 + 1} for q in questions]
    user_id = int(os.environ["MI_BENCH_USER"])
    headers = {"Authorization": f"Bearer {issue_user_token(os.environ['SECRET_KEY'], user_id)}"}
    spent: dict[str, list[float]] = {call: [] for call in CALLS}

    def post(call: str, body: dict[str, Any]) -> dict[str, Any]:
        started = time.thread_time()
        reply = client.post(f"/api/assessment/{call}", json=body, headers=headers)
        spent[call].append(time.thread_time() - started)
        if reply.status_code != 200:
            raise RuntimeError(f"{call}: {reply.status_code} {reply.get_data(as_text=True)[:300]}")
        return dict(reply.get_json()["data"] or {})

    for index in range(WARM_UP + n):
        if index == WARM_UP:
            spent = {call: [] for call in CALLS}
        record = post("createRecord", {})
        post("startAssessment", {"recordId": record["id"]})
        post("submitAnswers", {"recordId": record["id"], "answers": answers})
    return {call: statistics.median(values) * 1000 for call, values in spent.items()}


def run_tree(tree: Path, n: int, env: dict[str, str], app_name: str = PRODUCT) -> dict[str, float]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", str(n), "--app", app_name]
    # The tree's own broker library (a distribution of its own, installed from this tree's
    # ./broker in the virtualenv): a tree of another commit runs with the broker it shipped.
    path = os.pathsep.join(p for p in (str(tree / "broker" / "src"), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        argv,
        cwd=tree,
        env={**os.environ, **env, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: exit {done.returncode}: {done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.web_inprocess", description=__doc__.split("\n")[0])
    parser.add_argument("--tree", type=Path, help="the other tree (`git archive <commit> | tar -x -C DIR`)")
    parser.add_argument("--pairs", type=int, default=6, help="runs of each tree (default 6)")
    parser.add_argument("--n", type=int, default=300, help="measured submissions per run (default 300)")
    parser.add_argument(
        "--baselines", action="store_true", help="the lean WSGI app and its Flask twin as sides too"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: 1 pair of 20")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--app", default=PRODUCT, help=argparse.SUPPRESS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.child is not None:
        print(json.dumps(child(args.child, args.app)))
        return {}
    if args.quick:
        args.pairs, args.n = 1, 20
    from bench import ROOT, db, launch, output, stores

    database_url = stores.database_url()
    engine = db.prepare(database_url)
    # side -> (its tree, its app: PRODUCT or a BASELINES name)
    sides = {"this tree": (ROOT, PRODUCT)}
    if args.tree:
        sides["other tree"] = (args.tree.resolve(), PRODUCT)
    if args.baselines:
        sides |= {name: (ROOT, name) for name in BASELINES}
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    try:
        with stores.private_redis() as redis_url:
            env = {
                **launch.stack_env(redis_url, database_url),
                "MI_BENCH_USER": str(stores.BENCH_USER_BASE + 1),
            }
            for pair in range(args.pairs):
                order = list(sides) if pair % 2 == 0 else list(reversed(sides))
                for side in order:
                    tree, app_name = sides[side]
                    runs[side].append(run_tree(tree, args.n, env, app_name))
                    total = sum(runs[side][-1].values())
                    output.log(f"  pair {pair + 1} {side}: {total:.3f} ms CPU per submission")
    finally:
        db.delete_bench_records(engine)
    rows = []
    for side, results in runs.items():
        per_call = {call: statistics.median(r[call] for r in results) for call in CALLS}
        totals = [sum(r.values()) for r in results]
        rows.append([side, *(f"{per_call[c]:.3f}" for c in CALLS), f"{statistics.median(totals):.3f}"])
    tables = [
        output.print_table(
            f"Web app CPU per call (ms, median), one thread, {args.n} submissions × {args.pairs} runs",
            ["side", *CALLS, "submission"],
            rows,
        )
    ]
    data: dict[str, Any] = {"n": args.n, "pairs": args.pairs, "runs": runs, "tables": tables}
    if args.tree:
        ratios = _per_pair(runs["this tree"], runs["other tree"])
        data["ratios"] = ratios
        tables.append(_ratio_table("this tree / other tree, CPU per submission, per pair", ratios))
    for name in BASELINES if args.baselines else ():
        # The baseline's CPU over this tree's: what the rates would be in if CPU were all.
        ratios = _per_pair(runs[name], runs["this tree"])
        data.setdefault("baseline_ratios", {})[name] = ratios
        tables.append(_ratio_table(f"{name} / this tree, CPU per submission, per pair", ratios))
    output.write_results("web_inprocess", data)
    return data


def _per_pair(mine: list[dict[str, float]], other: list[dict[str, float]]) -> list[float]:
    return [sum(a.values()) / sum(b.values()) for a, b in zip(mine, other, strict=True)]


def _ratio_table(title: str, ratios: list[float]) -> str:
    from bench import output

    return output.print_table(
        title,
        ["pair", "ratio"],
        [
            *([i + 1, f"{r:.2f}"] for i, r in enumerate(ratios)),
            ["median", f"{statistics.median(ratios):.2f}"],
        ],
    )


if __name__ == "__main__":
    main()
