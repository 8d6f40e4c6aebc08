"""Chaos soak: the whole stack as `make run` runs it, a steady mixed load, seeded
overlapping faults for minutes or hours, then a checker of every promise per submission.

    python -m bench.soak --seed 23 --minutes 3 --report soak.json

The stack (bench/soak_stack.py) is `python -m scripts.run_stack` with the Procfile as it
ships (web 2 workers x 64 threads, worker 2 processes x 32 threads, hot path, reconciler) on a private
Redis and PostgreSQL, each behind a FaultProxy. The load (bench/soak_load.py) goes over
HTTP; the faults (bench/soak_faults.py) are drawn from the seed; after the fault phase the
faults are healed, the load stops, the pipeline settles, and the checker
(bench/soak_check.py) reads what the product stored (bench/soak_read.py). The exit status
is 0 only when every check held, the load's clients were always answered in the end, and
the pipeline settled. The JSON report holds the schedule, the figures and every violation.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import shutil
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import soak_read
from bench.soak_check import Autosave, Observed, Sample, check
from bench.soak_faults import Fault, Injector, schedule
from bench.soak_load import Load
from bench.soak_stack import REDIS_TOPOLOGIES, SoakStack
from scripts import lifeline, servers

SAMPLE_EVERY_S = 5.0
SETTLE_TIMEOUT_S = 420.0
#: How long the faults still running at the end of the fault phase may take to end.
FAULT_END_TIMEOUT_S = 60.0


def overlap_share(faults: Sequence[Fault], at_least: int = 2) -> float:
    """The share of the fault phase during which `at_least` faults were under way (an
    instant fault, a SIGKILL, counts for the second it takes the process to come back)."""
    windows = [(f.began, max(f.ended, f.began + 1.0)) for f in faults if f.began]
    if not windows:
        return 0.0
    start, end = min(w[0] for w in windows), max(w[1] for w in windows)
    step = 0.25
    busy = total = 0
    moment = start
    while moment < end:
        total += 1
        if sum(1 for a, b in windows if a <= moment < b) >= at_least:
            busy += 1
        moment += step
    return busy / total if total else 0.0


class Sampler:
    """RSS and open fds of every process of the stack, every SAMPLE_EVERY_S."""

    def __init__(self, stack: SoakStack) -> None:
        self.stack = stack
        self.series: dict[int, tuple[str, list[Sample]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            for pid, kind in self.stack.pids().items():
                found = soak_read.sample(pid)
                if found is not None:
                    self.series.setdefault(pid, (kind, []))[1].append(found)


def run(
    seed: int, minutes: float, users: int, folder: Path, redis_topology: str = "single"
) -> dict[str, Any]:
    seconds = minutes * 60
    stack = SoakStack(folder, redis_topology)
    try:
        stack.start()
        servers.log(f"soak: stack up at {stack.base_url}; seed {seed}, {minutes:g} min of faults")
        secrets = stack.secrets()
        admin_token = secrets["ADMIN_TOKENS"].split(",")[0].strip()
        load = Load(stack.base_url, secrets["SECRET_KEY"], admin_token, seed, users=users)
        faults = schedule(seed, seconds, redis_topology)
        injector = Injector(stack, faults)
        sampler = Sampler(stack)
        sampler.start()
        began = time.time()
        load.start(began, seconds)
        injector.start(began)
        time.sleep(max(0.0, began + seconds - time.time()))
        injector.join(FAULT_END_TIMEOUT_S)
        faults_over = time.time()
        stack.wait_ready()
        load.stop()
        servers.log(f"soak: faults over, load stopped; {len(load.accepted)} submissions accepted; settling")

        def queue_stats() -> dict[str, Any]:
            return dict(load.ok("GET", "/api/admin/queue/stats", admin_token))

        settle_s, unsettled = soak_read.wait_settled(
            stack.database_url, stack.redis_url, queue_stats, SETTLE_TIMEOUT_S, stack.state / "events"
        )
        sampler.stop()
        autosaves = []
        from web.auth import issue_user_token

        for record_id, (user_id, acked) in sorted(load.autosaves.items()):
            token = issue_user_token(secrets["SECRET_KEY"], user_id)
            shown = load.ok("GET", f"/api/assessment/record?recordId={record_id}", token)
            answers = {int(a["questionId"]): int(a["value"]) for a in shown["answers"]}
            autosaves.append(Autosave(record_id, acked, answers))
        observed = Observed(
            accepted=list(load.accepted),
            records=soak_read.stored_records(stack.database_url),
            events=soak_read.stored_events(stack.database_url),
            autosaves=autosaves,
            job_index=soak_read.job_index(stack.redis_url),
            faults=[(f.began, max(f.ended, f.began), f.kind) for f in faults if f.began],
            processes=sampler.series,
            regenerated_in_flight=set(load.regenerated_in_flight),
        )
        verdict = check(observed)
    finally:
        stack.stop()
    http_failures = sum(n for status, n in load.statuses.items() if status >= 500 and status != 503)
    return {
        "seed": seed,
        "minutes": minutes,
        "command": f"python -m bench.soak --seed {seed} --minutes {minutes:g}"
        + ("" if redis_topology == "single" else f" --redis {redis_topology}"),
        "redis": redis_topology,
        "shape": "Procfile as shipped: web 2 x 64 threads, worker 2 x 32, hotpath, reconciler",
        "faults": {
            "scheduled": len(faults),
            "by_kind": dict(Counter(f.kind for f in faults)),
            "not_injected": [f"{f.kind}: {f.note}" for f in faults if f.note.startswith(("not", "no "))],
            "overlap_share": round(overlap_share(faults), 3),
            "under_fault_share": round(overlap_share(faults, 1), 3),
            "schedule": [
                {"at": round(f.at, 2), "kind": f.kind, "duration": round(f.duration, 2), "note": f.note}
                for f in faults
            ],
        },
        "stack_restarts": stack.restarts,
        "settled_after_faults_s": round(time.time() - faults_over, 1) if unsettled is None else None,
        "settle_s": round(settle_s, 1),
        "unsettled": unsettled,
        "http": {str(k): v for k, v in sorted(load.statuses.items())},
        "http_5xx_other_than_503": http_failures,
        "admin_actions": load.admin_actions,
        "regenerated_in_flight": len(load.regenerated_in_flight),
        "load_errors": load.errors,
        "submitted_after_a_503": sorted(load.refused_then_submitted),
        "figures": verdict.figures,
        "violations_by_kind": verdict.counts(),
        "violations": [v.__dict__ for v in verdict.violations[:200]],
        # The event log of each record named by a violation (the first 50), to read what happened.
        "timelines": {
            str(rid): [
                {"type": e.type, "at": round(e.at, 3), "data": e.data}
                for e in sorted(observed.events, key=lambda e: e.at)
                if e.record_id == rid
            ]
            for rid in sorted({v.record_id for v in verdict.violations if v.record_id is not None})[:50]
        },
        "ok": not verdict.violations and not load.errors and unsettled is None,
    }


def keep_logs(folder: Path, target: Path) -> None:
    """The processes' logs (`make run`'s, supervisord's per type) and the servers'."""
    target.mkdir(parents=True, exist_ok=True)
    for log in [*folder.glob("make-run-*.log"), *(folder / "state" / "logs").glob("*.log")]:
        shutil.copy(log, target / log.name)
    for name, log in (
        ("redis.log", folder / "redis" / "redis.log"),
        ("postgres.log", folder / "pg" / "postgres.log"),
        *((f"{server.name}.log", server / "out.log") for server in (folder / "sentinel").glob("*")),
    ):
        if log.exists():
            shutil.copy(log, target / name)


def _terminate(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--minutes", type=float, default=3.0, help="length of the fault phase")
    parser.add_argument("--users", type=int, default=8, help="concurrent users submitting")
    parser.add_argument(
        "--redis",
        choices=REDIS_TOPOLOGIES,
        default="single",
        help="one Redis behind a fault proxy, or a Sentinel deployment (failovers, masters killed)",
    )
    parser.add_argument("--report", type=Path, default=None, help="write the JSON report here")
    parser.add_argument("--logs", type=Path, default=None, help="copy the stack's and servers' logs here")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    # `kill -USR1 <pid>` prints every thread's stack: what a long run is waiting for.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # SIGTERM stops the stack in order (the `finally` of `run`); whatever this process
    # started ends with it however it ends (the servers too: they are tracked once attached).
    signal.signal(signal.SIGTERM, _terminate)
    lifeline.attach()
    with servers.temporary_directory("mi-soak-") as folder:
        try:
            result = run(args.seed, args.minutes, args.users, folder, args.redis)
        finally:
            if args.logs:
                keep_logs(folder, args.logs)
    text = json.dumps(result, indent=2, ensure_ascii=False)
    if args.report:
        args.report.write_text(text + "\n")
    summary = {k: result[k] for k in ("seed", "minutes", "stack_restarts", "settle_s", "unsettled", "ok")}
    print(json.dumps({**summary, "figures": result["figures"], "violations": result["violations_by_kind"]}))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
