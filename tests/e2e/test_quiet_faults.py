"""Quiet under faults: while Redis or PostgreSQL is gone, each process of `make run` waits.

The whole stack runs as `make run` runs it (scripts/run_stack.py: supervisord on the
Procfile's lines), on the test servers reached through `FaultProxy`s, so an outage is a
proxy cut off, never a shared server stopped. During an outage of OUTAGE_S seconds the
test measures, per Procfile process, the CPU time it spends (/proc/<pid>/stat, its
children included: gunicorn's and Dramatiq's worker processes) and what it writes to its
log (.state/logs/<type>.log), and asserts both stay small: a failing loop waits with
backoff and logs its failure once, then a summary while it lasts, then its end
(broker/src/listbroker/backoff.py). CPU time is work done, not wall-clock time, so the bounds
hold on a loaded machine. Afterwards the stack recovers: a submission made during the
outage and one made after it both reach status 4.

Issue 19: a worker whose Redis was gone ran 46 minutes at a core and wrote 8.2 million lines.
`MI_QUIET_OUTAGE_S` sets the outage (default 25 s); the figures are printed for docs/reliability.md.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from config.settings import Settings
from scripts.faults import FaultProxy
from services.domain.status import RecordStatus
from tests.support.proc_stats import tree_cpu_s
from tests.support.processes import sessions_waiting_for_a_lock
from tests.support.stack import Stack, StackOptions

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

OUTAGE_S = float(os.environ.get("MI_QUIET_OUTAGE_S", "25"))
#: The Procfile's long-running types, as supervisord names them.
TYPES = ("web", "worker", "hotpath", "reconciler")
#: Most CPU a process may spend during the outage, as a share of one core. An idle stack
#: spends well under 1 %; the worker of issue 19 spent 100 %.
MAX_CPU_SHARE = 0.05
#: Most log lines a process may write during the outage: a failing loop writes one line
#: (and its recovery after the outage), not one per attempt. The worker runs two
#: processes, each with several loops (housekeeping, two consumers, heartbeat, counts).
#: The web's count includes a submission made during the Redis outage (one line per store it
#: could not use; its access line is in access.log, not web.log).
MAX_LINES = {"web": 20, "worker": 30, "hotpath": 12, "reconciler": 6}
#: Loops per process that may each add a summary line a minute to a longer outage
#: (MI_QUIET_OUTAGE_S): web's heartbeat per gunicorn worker; per worker process its
#: housekeeping, two consumers, heartbeat and counts; the hot path's loops, settings and
#: heartbeat; the reconciler's passes and heartbeat.
LOOPS = {"web": 2, "worker": 10, "hotpath": 6, "reconciler": 2}
#: Most bytes of log a process may write during the outage.
MAX_BYTES = 12_000
#: Two worker processes as the Procfile runs them; the reconciler's fast timings let it
#: heal a submission whose job was lost to the Redis outage within seconds.
EXTRA = {
    "WORKER_PROCESSES": "2",
    "WORKER_THREADS": "4",
    "RECONCILE_GRACE_MS": "2000",
    "RECONCILE_INTERVAL_MS": "1000",
    "HOTPATH_ANSWERS_INTERVAL_MS": "5000",
}


@dataclasses.dataclass(frozen=True)
class Sample:
    pid: int
    cpu_s: float
    log_bytes: int


@dataclasses.dataclass(frozen=True)
class Usage:
    cpu_s: float
    lines: int
    log_bytes: int
    text: str


def sample(stack: Stack) -> dict[str, Sample]:
    found = {}
    for name in TYPES:
        pid = int(stack.current.info(name)["pid"])
        log = stack.logs / "state" / "logs" / f"{name}.log"
        found[name] = Sample(pid, tree_cpu_s(pid), log.stat().st_size)
    return found


def usage(stack: Stack, before: dict[str, Sample], after: dict[str, Sample]) -> dict[str, Usage]:
    used = {}
    for name in TYPES:
        assert after[name].pid == before[name].pid, f"{name} was restarted during the outage"
        with (stack.logs / "state" / "logs" / f"{name}.log").open("rb") as log:
            log.seek(before[name].log_bytes)
            written = log.read(after[name].log_bytes - before[name].log_bytes)
        used[name] = Usage(
            after[name].cpu_s - before[name].cpu_s,
            written.count(b"\n"),
            len(written),
            written.decode(errors="replace"),
        )
    return used


@pytest.fixture(scope="module")
def proxies(settings: Settings, redis_url: str) -> Iterator[dict[str, FaultProxy]]:
    found = {"redis": FaultProxy(redis_url), "postgres": FaultProxy(settings.database_url)}
    yield found
    for proxy in found.values():
        proxy.close()


@pytest.fixture(scope="module")
def stack_options(proxies: dict[str, FaultProxy]) -> StackOptions:
    return StackOptions(extra=EXTRA, database_url=proxies["postgres"].url, redis_url=proxies["redis"].url)


def submit(stack: Stack, user_id: int) -> tuple[str, int, dict[str, object]]:
    """A user's record, started and submitted over HTTP: (token, record id, the answer)."""
    token = stack.user(user_id)
    record_id = stack.ok("POST", "/api/assessment/createRecord", token)["id"]
    stack.ok("POST", "/api/assessment/startAssessment", token, {"recordId": record_id})
    questions = stack.ok("GET", "/api/assessment/questions", token)
    answers = [{"questionId": q["id"], "value": 1 + q["id"] % 5} for q in questions]
    submitted = stack.ok(
        "POST", "/api/assessment/submitAnswers", token, {"recordId": record_id, "answers": answers}
    )
    return token, int(record_id), dict(submitted)


def outage(
    stack: Stack, proxy: FaultProxy, meanwhile: Callable[[], object] | None = None
) -> dict[str, Usage]:
    """What each process spent while `proxy` was down for OUTAGE_S (`meanwhile` done first)."""
    before = sample(stack)
    proxy.down()
    try:
        if meanwhile is not None:
            meanwhile()
        time.sleep(OUTAGE_S)
        after = sample(stack)
    finally:
        proxy.up()
    return usage(stack, before, after)


def report(kind: str, used: dict[str, Usage]) -> str:
    return "\n".join(
        f"{kind} outage {OUTAGE_S:.0f} s: {name:<10} {u.cpu_s:6.2f} CPU s"
        f" ({100 * u.cpu_s / OUTAGE_S:4.1f} % of a core)  {u.lines:3d} lines  {u.log_bytes:6d} bytes"
        for name, u in used.items()
    )


def assert_quiet(kind: str, used: dict[str, Usage]) -> None:
    figures = report(kind, used)
    print("\n" + figures)
    for name, u in used.items():
        assert u.cpu_s < MAX_CPU_SHARE * OUTAGE_S, (
            f"{name} spent {u.cpu_s:.2f} CPU s\n{figures}\n{u.text[-3000:]}"
        )
        most = MAX_LINES[name] + LOOPS[name] * int(OUTAGE_S // 60)
        assert u.lines <= most, f"{name} wrote {u.lines} lines\n{figures}\n{u.text[-3000:]}"
        assert u.log_bytes <= MAX_BYTES * (1 + int(OUTAGE_S // 60)), (
            f"{name} wrote {u.log_bytes} bytes\n{figures}\n{u.text[-3000:]}"
        )


def test_a_redis_outage_costs_each_process_little_cpu_and_few_lines(
    stack: Stack, proxies: dict[str, FaultProxy]
) -> None:
    token, first, _ = submit(stack, 501)
    stack.wait_for_status(token, first, RecordStatus.COMPLETED, timeout=60)
    made: list[tuple[str, int, dict[str, object]]] = []
    # A user submits meanwhile: saved in PostgreSQL, its job not queued (the reconciler heals it).
    assert_quiet("Redis", outage(stack, proxies["redis"], meanwhile=lambda: made.append(submit(stack, 502))))
    [(during_token, during, answered)] = made
    assert answered["enqueued"] is False
    stack.wait_for_status(during_token, during, RecordStatus.COMPLETED, timeout=120)
    token, later, _ = submit(stack, 503)
    stack.wait_for_status(token, later, RecordStatus.COMPLETED, timeout=120)


def test_a_postgresql_outage_costs_each_process_little_cpu_and_few_lines(
    stack: Stack, proxies: dict[str, FaultProxy], settings: Settings
) -> None:
    token, first, _ = submit(stack, 601)
    stack.wait_for_status(token, first, RecordStatus.COMPLETED, timeout=60)
    # Answers saved during an assessment wait in Redis for the hot path's answer flusher
    # (every 5 s here), which then finds the database gone.
    saving = stack.user(602)
    saved = stack.ok("POST", "/api/assessment/createRecord", saving)["id"]
    stack.ok("POST", "/api/assessment/startAssessment", saving, {"recordId": saved})
    questions = stack.ok("GET", "/api/assessment/questions", saving)
    answers = [{"questionId": q["id"], "value": 2} for q in questions]
    stack.ok("POST", "/api/assessment/saveAnswers", saving, {"recordId": saved, "answers": answers})
    # And a report is being written when the database goes: its insert waits on a table lock
    # held here (directly, not through the proxy), so the worker is mid-transaction at the cut.
    direct = settings.database_url.replace("+psycopg", "")
    with psycopg.connect(direct) as holder:
        holder.execute("LOCK TABLE report_summaries IN EXCLUSIVE MODE")
        cut_token, cut, _ = submit(stack, 603)
        stack.wait_until(
            lambda: sessions_waiting_for_a_lock(direct) >= 1, timeout=60, what="the report's blocked insert"
        )
        used = outage(stack, proxies["postgres"])
        holder.rollback()
    assert_quiet("PostgreSQL", used)
    stack.wait_for_status(cut_token, cut, RecordStatus.COMPLETED, timeout=120)
    # The saved answers are the record's: submitted without a body of its own, it gets its report.
    stack.wait_until(
        lambda: submitted_without_answers(stack, saving, saved), timeout=120, what="the submission"
    )
    stack.wait_for_status(saving, saved, RecordStatus.COMPLETED, timeout=120)
    token, later, _ = submit(stack, 604)
    stack.wait_for_status(token, later, RecordStatus.COMPLETED, timeout=120)


def submitted_without_answers(stack: Stack, token: str, record_id: int) -> bool:
    status, envelope = stack.call("POST", "/api/assessment/submitAnswers", token, {"recordId": record_id})
    return status == 200 and envelope["code"] == 0
