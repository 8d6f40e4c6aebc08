"""`make demo`: simulated users take the assessment against the running stack, over HTTP.

    make demo [DEMO_ARGS="--records N --users K --timeout S --seed X"]
    .venv/bin/python -m scripts.demo [--records N] [--users K] [--timeout S] [--seed X]

Each simulated user has a profile (理工型, 文艺型, 运动型, ...) that shapes their answers,
so reports differ. The users create, start and submit their records concurrently; a
progress bar follows the reports (each user's records are polled), then a summary:
how many completed, time from submit to report (p50/p95), the queue figures and one
finished report.

Where the stack is, as a user would find it: flags (--base-url, --secret-key,
--admin-token), else the environment (BASE_URL, SECRET_KEY, ADMIN_TOKENS), else the
state folder of `make run` (MI_STATE_DIR, default .state/: stack.json, secrets.json).

Exit code 0 when every report completed, 1 otherwise, 2 when the stack cannot be found
or used, 130 when interrupted. The parts live in scripts/demo_lib/.
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from scripts.demo_lib import render
from scripts.demo_lib.client import Api, ApiError, DemoError, resolve_target
from scripts.demo_lib.simulation import (
    POLL_INTERVAL_S,
    RunState,
    load_questions,
    make_users,
    pick_report,
    poll_once,
    split_records,
    submit_records,
)
from scripts.demo_lib.stats import summarize
from services.domain.status import RecordStatus


def run(args: argparse.Namespace) -> int:
    console = render.make_console()
    target = resolve_target(args)
    api = Api(target.base_url)
    api.check_ready(target.source)
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    rng = random.Random(seed)
    users = make_users(args.users, target.secret_key, rng)
    questions = load_questions(api, users[0].token)
    render.banner(console, target, seed=seed, records=args.records, users=users, questions=len(questions))

    state = RunState(total=args.records)
    bar = render.ReportsBar(console, state)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(users)) as pool:
        futures = [
            pool.submit(submit_records, api, user, count, questions, seed=rng.randrange(2**32), state=state)
            for user, count in zip(users, split_records(args.records, len(users)), strict=True)
        ]
        deadline = started + args.timeout
        while time.monotonic() < deadline:
            poll_once(api, users, state)
            bar.draw()
            all_submitted = all(f.done() for f in futures)
            if all_submitted and not state.submitting_took:
                state.submitting_took = time.monotonic() - started
            with state.lock:
                finished = len(state.done_at)
                attempted = len(state.submitted_at) + len(state.errors)
            if all_submitted and finished >= len(state.submitted_at) and attempted >= args.records:
                break
            time.sleep(POLL_INTERVAL_S)
        bar.draw(final=True)
        timed_out = time.monotonic() >= deadline
    elapsed = time.monotonic() - started
    state.submitting_took = state.submitting_took or elapsed

    queue: dict[str, Any] | str
    try:
        queue = api.call("GET", "/api/admin/queue/stats", target.admin_token)
    except ApiError as exc:
        queue = str(exc)
    summary = summarize(state)
    render.print_summary(
        console,
        render.summary_table(
            summary, users=len(users), elapsed=elapsed, timed_out=timed_out, timeout=args.timeout, queue=queue
        ),
    )
    shown = pick_report(users, state)
    if shown:
        user, record_id = shown
        try:
            report = api.call("GET", f"/api/assessment/report?recordId={record_id}", user.token)
        except ApiError as exc:
            console.print(f"    report of record {record_id} unavailable: {exc}", soft_wrap=True)
        else:
            render.print_report(console, report, user)
    console.print()
    return 0 if state.count(RecordStatus.COMPLETED) == args.records else 1


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=40, metavar="N", help="records to submit (default 40)")
    parser.add_argument("--users", type=int, default=5, metavar="K", help="simulated users (default 5)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="give up on reports after S seconds (default 60)",
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed, to replay a run")
    parser.add_argument("--base-url", default=None, help="default: BASE_URL, else .state/stack.json")
    parser.add_argument("--secret-key", default=None, help="default: SECRET_KEY, else .state/secrets.json")
    parser.add_argument("--admin-token", default=None, help="default: ADMIN_TOKENS, else .state/secrets.json")
    args = parser.parse_args(argv)
    if args.records < 1 or args.users < 1 or args.timeout <= 0:
        parser.error("--records and --users must be at least 1, --timeout positive")
    args.users = min(args.users, args.records)
    return args


def main(argv: Sequence[str]) -> int:
    # `make demo DEMO_ARGS="--records 200 --users 8"`: make passes its variables to the environment.
    args = parse_args([*shlex.split(os.environ.get("DEMO_ARGS", "")), *argv])
    try:
        return run(args)
    except DemoError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ndemo: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
