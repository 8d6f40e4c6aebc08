"""The soak's checker: every promise, per accepted submission, from what the product stored.

Pure: it takes plain data (the rows bench/soak_read.py reads from PostgreSQL, Redis and the
admin API, what the load's clients were answered, the fault windows, /proc samples) and
says which promise was broken where. tests/unit/test_soak_check.py feeds it planted
violations, so each check is shown to fail.

The promises:
- an accepted submission (HTTP 200, or an answer lost after the commit) ends in status 4
  with exactly one report (8 dimension results), or in 5 only if its record was in the
  fault drill; its stored answers are the ones submitted;
- its status never goes back: read from the event log, where each status change leaves
  its event (`EVENT_STATUS`); the final status is the one the events say;
- each attempt is within the budget (attempt <= MAX_RETRY_COUNT + 1); a failed attempt is
  retried after 10/30/60 s (never early; late only while a fault or its recovery lasts);
- a dead letter that sets status 5 comes after a full chain of failed attempts begun since
  the record's last (re)start, i.e. after its newest job's last attempt; no attempt fails
  once the record was no longer being generated (the drill must not fail a job that would
  have been skipped);
- each event is stored once (no id twice), each step's event is there (created, started,
  submitted, and one generated per generation), and no report is generated twice per start;
- each acknowledged autosave is in the record's answers;
- after settling: no job for a record that does not exist, no record in status 3 without one;
- per process: open file descriptors and RSS flat (`leaks`).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from config.retries import MAX_RETRY_COUNT, RETRY_DELAYS_MS

#: A retry's next attempt may end this much before its due time, measured between the events'
#: recorded times (the failure's event is written a moment before the retry is scheduled).
EARLY_TOLERANCE_S = 0.5
#: ... and this much after it outside faults: the broker's lateness (README: <= 0.25 s) plus
#: the next attempt's own run (its event is written when it ends) on a loaded 2-core machine.
LATE_TOLERANCE_S = 5.0
#: After a fault ends, the processes take up to this long to be back at work (the consumer's
#: reconnect backoff is at most 5 + 10 s, the availability gate's probe at most 5 s).
RECOVERY_S = 20.0
CLOCK_SLACK_S = 0.5
#: The reconciler's `report.requeued` is logged after its job is queued: the job's first attempt
#: can end this long before it on a loaded machine. (A submission's and a regeneration's events
#: commit with their change, before the job is queued.)
RESTART_EVENT_LAG_S = 1.0
#: A process is checked for leaks when it lived this long; its first WARMUP_S are skipped.
LEAK_MIN_SPAN_S = 90.0
WARMUP_S = 30.0
#: Open fds in the last quarter of a process's samples above the most it had in its first
#: half that are a leak. Against the first half's most, not its start: a process's pools
#: open their connections when first needed (the event sink's direct writer at the first
#: Redis failure, a worker pool's overflow under a PostgreSQL restart), a step that stays
#: within their bounds (the 60-minute run: +31 in a web worker, +26 in a worker, flat
#: after); a leak keeps growing in the second half.
FD_GROWTH_LIMIT = 24
RSS_GROWTH_LIMIT_KB = 64 * 1024
RSS_GROWTH_LIMIT_RATIO = 0.5

STATUS_STARTED = 2
STATUS_GENERATING = 3
STATUS_COMPLETED = 4
STATUS_FAILED = 5
#: What each event sets the record's status to (None: no change). `report.dead_lettered`
#: sets 5 only when its data says `statusSet: true`.
EVENT_STATUS: dict[str, int | None] = {
    "record.created": 1,
    "record.started": STATUS_STARTED,
    "answers.saved": None,
    "answers.submitted": STATUS_GENERATING,
    "report.generated": STATUS_COMPLETED,
    "report.generation_failed": None,
    "report.dead_lettered": STATUS_FAILED,
    "report.regenerated": STATUS_GENERATING,
    "report.requeued": None,
    "report.failure_recorded": STATUS_FAILED,
    "report.retry_deleted": STATUS_FAILED,
    "record.deleted": None,
}
#: Status changes that are allowed backwards: an admin's regeneration of a failed record.
RESTARTS = {"report.regenerated"}
ATTEMPT_EVENTS = {"report.generated", "report.generation_failed"}
MAX_ATTEMPTS = MAX_RETRY_COUNT + 1
DELAYS_S = [ms / 1000 for ms in RETRY_DELAYS_MS]
DIMENSIONS = 8


@dataclass(frozen=True)
class EventRow:
    id: str
    type: str
    at: float  # occurred_at, epoch seconds
    record_id: int | None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredRecord:
    """What PostgreSQL holds for a record at the end."""

    record_id: int
    status: int
    reports: int  # rows in report_summaries
    dimensions: int  # rows in dimension_results
    answers: dict[int, int]  # question id -> value, the answers table
    completed_at: float | None = None  # when its report was written (epoch seconds)


@dataclass(frozen=True)
class Accepted:
    """A submission the product accepted: answered 200, or its answer lost after the commit."""

    record_id: int
    answers: dict[int, int]
    drilled: bool
    at: float  # wall clock
    #: False: the submission's answer was lost and its retry refused (2005): the commit
    #: happened (and with it `answers.submitted`, written in the submission's transaction).
    answered: bool = True
    #: startAssessment calls the client made (a retry of a lost answer starts again, idempotent).
    starts: int = 1


@dataclass(frozen=True)
class Autosave:
    """Answers a saveAnswers call acknowledged (200), and what the record shows at the end."""

    record_id: int
    acknowledged: dict[int, int]
    shown: dict[int, int]


@dataclass(frozen=True)
class Sample:
    at: float
    rss_kb: int
    fds: int


@dataclass
class Observed:
    accepted: list[Accepted]
    records: dict[int, StoredRecord]
    events: list[EventRow]
    autosaves: list[Autosave] = field(default_factory=list)
    #: RecordIds of jobs alive in Redis (report:queue:jobs), after settling.
    job_index: dict[int, str] = field(default_factory=dict)
    #: (start, end, kind) of every fault, wall clock.
    faults: list[tuple[float, float, str]] = field(default_factory=list)
    #: pid -> (process type, samples)
    processes: dict[int, tuple[str, list[Sample]]] = field(default_factory=dict)
    #: Records an admin regenerated while they were still in status 3 (jobs overlap).
    regenerated_in_flight: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class Violation:
    kind: str
    record_id: int | None
    detail: str


@dataclass
class Verdict:
    violations: list[Violation] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def add(self, kind: str, record_id: int | None, detail: str) -> None:
        self.violations.append(Violation(kind, record_id, detail))

    def counts(self) -> dict[str, int]:
        return dict(Counter(v.kind for v in self.violations))


def check(observed: Observed) -> Verdict:
    verdict = Verdict()
    grouped: dict[int, list[EventRow]] = {}
    for event in observed.events:
        if event.record_id is not None:
            grouped.setdefault(event.record_id, []).append(event)
    # By their recorded times: a submission's and a regeneration's events carry the time of
    # their change's transaction (written in it), before any attempt of the job it queued.
    by_record = {rid: sorted(events, key=lambda e: e.at) for rid, events in grouped.items()}
    check_event_ids(observed.events, verdict)
    for submission in observed.accepted:
        check_submission(submission, observed, by_record.get(submission.record_id, []), verdict)
    check_autosaves(observed.autosaves, verdict)
    check_jobs(observed, verdict)
    check_leaks(observed.processes, verdict)
    finals = Counter(
        observed.records[s.record_id].status if s.record_id in observed.records else 0
        for s in observed.accepted
    )
    verdict.figures.update(
        accepted=len(observed.accepted),
        drilled=sum(1 for s in observed.accepted if s.drilled),
        completed=finals.get(STATUS_COMPLETED, 0),
        failed=finals.get(STATUS_FAILED, 0),
        reports=sum(
            min(observed.records[s.record_id].reports, 1)
            for s in observed.accepted
            if s.record_id in observed.records
        ),
        lost=sum(1 for v in verdict.violations if v.kind == "lost"),
        duplicated=sum(1 for v in verdict.violations if v.kind in ("duplicate report", "duplicate event")),
        schedule_violations=sum(1 for v in verdict.violations if v.kind.startswith("retry")),
        leaks=sum(1 for v in verdict.violations if v.kind.startswith("leak")),
        autosaves_checked=len(observed.autosaves),
        events=len(observed.events),
        violations=len(verdict.violations),
    )
    return verdict


def check_event_ids(events: Sequence[EventRow], verdict: Verdict) -> None:
    for event_id, count in Counter(e.id for e in events).items():
        if count > 1:
            record = next(e.record_id for e in events if e.id == event_id)
            verdict.add("duplicate event", record, f"event {event_id} stored {count} times")


def check_submission(
    submission: Accepted, observed: Observed, events: list[EventRow], verdict: Verdict
) -> None:
    rid = submission.record_id
    stored = observed.records.get(rid)
    if stored is None:
        verdict.add("lost", rid, "accepted, but no such record")
        return
    if stored.status not in (STATUS_COMPLETED, STATUS_FAILED):
        verdict.add("lost", rid, f"accepted, still in status {stored.status} after settling")
    if stored.status == STATUS_FAILED and not submission.drilled:
        verdict.add("false failure", rid, "status 5, but its generations were never drilled to fail")
    if stored.status == STATUS_COMPLETED and (stored.reports != 1 or stored.dimensions != DIMENSIONS):
        verdict.add(
            "report", rid, f"status 4 with {stored.reports} report(s), {stored.dimensions} dimension rows"
        )
    if stored.answers != submission.answers:
        missing = {q: v for q, v in submission.answers.items() if stored.answers.get(q) != v}
        verdict.add(
            "answers",
            rid,
            f"stored answers differ from the submitted ones: {dict(list(missing.items())[:5])}",
        )
    counts = Counter(e.type for e in events)
    # How many of each step's events the client's calls may have made.
    expected = {
        "record.created": (1, 1),
        "record.started": (1, submission.starts),
        # Committed with the submission: there even when the web died before answering.
        "answers.submitted": (1, 1),
    }
    for step, (least, most) in expected.items():
        if not least <= counts[step] <= most:
            kind = "missing event" if counts[step] < least else "duplicate event"
            verdict.add(kind, rid, f"{step} stored {counts[step]} times ({least} to {most} expected)")
    check_timeline(rid, events, stored, observed, verdict)
    check_attempts(rid, events, observed, verdict)


def _worker_kills(
    faults: Iterable[tuple[float, float, str]], since: float, until: float
) -> list[tuple[float, str]]:
    """(time, kind) of each SIGKILL that ends a worker (its own, or the supervisor's) in [since, until]."""
    return [
        (began, kind)
        for began, _, kind in faults
        if kind in ("kill:worker", "kill:supervisor") and since <= began <= until
    ]


def check_timeline(
    rid: int, events: list[EventRow], stored: StoredRecord, observed: Observed, verdict: Verdict
) -> None:
    """Status never goes back (but by a regeneration); one report per start; the final status
    is the events' last word."""
    final = stored.status
    status = 0
    generated = 0
    for event in events:
        target = EVENT_STATUS.get(event.type)
        if event.type == "report.dead_lettered" and not event.data.get("statusSet"):
            target = None
        if event.type in RESTARTS:
            generated = 0
        if target is not None and not _forward(status, target, event.type):
            verdict.add("status went back", rid, f"{event.type} set {target} after {status}")
        if event.type == "report.generated":
            generated += 1
            if generated > 1:
                verdict.add(
                    "duplicate report", rid, "a second report.generated without a regeneration between"
                )
        if target is not None:
            status = target
    if status in (STATUS_COMPLETED, STATUS_FAILED) and status != final:
        verdict.add("timeline", rid, f"the events end in status {status}, the record is in {final}")
    if final == STATUS_COMPLETED and status != STATUS_COMPLETED:
        # Even with a worker SIGKILLed between the report's commit and its event: its redelivered
        # job finds status 4 and logs that report's event (one id per report, stored once).
        verdict.add(
            "missing event", rid, f"status 4 but the events end in {status} (report.generated missing)"
        )


def _forward(status: int, target: int, event_type: str) -> bool:
    """1 -> 2 -> 3 -> 4 or 5; 4 is final; from 5 (or 3) only a regeneration leads back to 3."""
    if status == STATUS_COMPLETED:
        return target == STATUS_COMPLETED
    if event_type in RESTARTS:
        return status in (STATUS_GENERATING, STATUS_FAILED)
    if status == STATUS_FAILED:
        return target == STATUS_FAILED
    return target >= status


def _epochs(events: list[EventRow]) -> list[list[EventRow]]:
    """The events split at each start of a new job: a submission, a regeneration that queued
    one, the reconciler's. A regeneration whose job the queue refused (`enqueued: false`)
    reset the record but started no job: a job of the record still alive goes on with its
    chain, or, with none alive, the reconciler's job starts the next epoch."""
    epochs: list[list[EventRow]] = [[]]
    for event in events:
        if _starts_a_job(event) and epochs[-1]:
            # The reconciler's event is logged once its job is queued, and that job's first
            # attempt may end (a drilled failure) moments before it: such an attempt 1 is
            # the new job's (found by the 60-minute soak: 2-87 ms before).
            moved = [
                e
                for e in epochs[-1]
                if event.type == "report.requeued"
                and e.type == "report.generation_failed"
                and e.data.get("attempt") == 1
                and event.at - e.at <= RESTART_EVENT_LAG_S
            ]
            epochs[-1] = [e for e in epochs[-1] if e not in moved]
            epochs.append(moved)
        epochs[-1].append(event)
    return epochs


def _starts_a_job(event: EventRow) -> bool:
    if event.type == "report.regenerated":
        return event.data.get("enqueued") is not False
    return event.type in ("answers.submitted", "report.requeued")


def _in_fault(start: float, end: float, faults: Iterable[tuple[float, float, str]]) -> bool:
    return any(f_start <= end and start <= f_end + RECOVERY_S for f_start, f_end, _ in faults)


def _overlapping_from(events: list[EventRow]) -> float | None:
    """When the record first had two jobs at once: a regeneration (single, batch or
    matching) while it was still in status 3, its old job retrying."""
    status = 0
    for event in events:
        if event.type in RESTARTS and status == STATUS_GENERATING and _starts_a_job(event):
            return event.at
        target = EVENT_STATUS.get(event.type)
        if event.type == "report.dead_lettered" and not event.data.get("statusSet"):
            target = None
        if target is not None:
            status = target
    return None


def check_attempts(rid: int, events: list[EventRow], observed: Observed, verdict: Verdict) -> None:
    overlap = _overlapping_from(events)
    for epoch in _epochs(events):
        attempts = [e for e in epoch if e.type in ATTEMPT_EVENTS and isinstance(e.data.get("attempt"), int)]
        for event in attempts:
            if event.data["attempt"] > MAX_ATTEMPTS:
                verdict.add("attempt budget", rid, f"attempt {event.data['attempt']} > {MAX_ATTEMPTS}")
        # An attempt that fails once the record is no longer being generated (its report
        # made, or its status set to 5) would have been skipped: it must not fail.
        settled_at = next(
            (
                e.at
                for e in epoch
                if e.type == "report.generated"
                or (e.type == "report.dead_lettered" and e.data.get("statusSet"))
            ),
            None,
        )
        if settled_at is not None:
            for event in attempts:
                if event.type == "report.generation_failed" and event.at > settled_at:
                    verdict.add(
                        "failed a finished record",
                        rid,
                        f"attempt {event.data['attempt']} failed {event.at - settled_at:.1f} s"
                        " after the record was settled",
                    )
        for dead in (e for e in epoch if e.type == "report.dead_lettered" and e.data.get("statusSet")):
            before = [e for e in attempts if e.at <= dead.at]
            if _full_chain(before):
                continue
            poison = _poison_pill(dead, epoch[0].at, observed.faults)
            if poison:
                verdict.figures.setdefault("poison_pills", []).append(f"record {rid}: {poison}")
                continue
            verdict.add(
                "dead letter before the last attempt",
                rid,
                "status 5 set by a dead letter while the record's newest job had attempts left",
            )
        # The schedule pairs attempt n with attempt n + 1 of the same job: only where the
        # record had one job (no regeneration while a job retried, no reconciler's job).
        overlapped = overlap is not None and bool(epoch) and epoch[-1].at >= overlap
        if (
            rid not in observed.regenerated_in_flight
            and not overlapped
            and not any(e.type == "report.requeued" for e in epoch)
        ):
            check_schedule(rid, attempts, observed.faults, verdict)


def _poison_pill(dead: EventRow, since: float, faults: Iterable[tuple[float, float, str]]) -> str | None:
    """A dead letter the broker made of a job lost with its worker more than its allowance
    (`lostDeliveries` in its event; listbroker.retries.DEFAULT_MAX_LOST_DELIVERIES), if it
    is one and as many worker SIGKILLs (or the supervisor's) fall between the record's
    (re)start and the dead letter: listed apart with the kills; without them, a violation.
    Lost deliveries spend no attempt of the schedule, so any other short chain is one."""
    lost = dead.data.get("lostDeliveries")
    if not isinstance(lost, int):
        return None
    kills = _worker_kills(faults, since - CLOCK_SLACK_S, dead.at)
    if len(kills) < lost:
        return None
    return f"lost with its worker {lost} times; {len(kills)} worker kill(s) in between"


def _full_chain(attempts: list[EventRow]) -> bool:
    """Failed attempts 1, 2, ..., MAX_ATTEMPTS of one job: each at least its delay after the one
    before (a job started later cannot supply the earlier links)."""
    failed = [e for e in attempts if e.type == "report.generation_failed"]
    ends: list[float] = [e.at for e in failed if e.data["attempt"] == 1]
    for number in range(2, MAX_ATTEMPTS + 1):
        delay = DELAYS_S[number - 2] - EARLY_TOLERANCE_S
        ends = [
            e.at for e in failed if e.data["attempt"] == number and any(e.at >= prev + delay for prev in ends)
        ]
        if not ends:
            return False
    return True


def check_schedule(
    rid: int, attempts: list[EventRow], faults: list[tuple[float, float, str]], verdict: Verdict
) -> None:
    """Attempt n failed at t: attempt n + 1 ends at t + delay(n), never early, late only under a fault."""
    for failure in (e for e in attempts if e.type == "report.generation_failed"):
        number = failure.data["attempt"]
        if number > MAX_RETRY_COUNT:
            continue
        following = [e for e in attempts if e.data["attempt"] == number + 1 and e.at > failure.at]
        if not following:
            continue
        gap = following[0].at - failure.at
        due = DELAYS_S[number - 1]
        if gap < due - EARLY_TOLERANCE_S:
            verdict.add(
                "retry early",
                rid,
                f"attempt {number + 1} {due - gap:.2f} s before its due time ({due:.0f} s)",
            )
        elif gap > due + LATE_TOLERANCE_S:
            if _in_fault(failure.at, following[0].at, faults):
                verdict.figures["retries_late_under_fault"] = (
                    verdict.figures.get("retries_late_under_fault", 0) + 1
                )
            else:
                verdict.add(
                    "retry late", rid, f"attempt {number + 1} {gap - due:.1f} s late, no fault meanwhile"
                )
        else:
            verdict.figures["retries_on_time"] = verdict.figures.get("retries_on_time", 0) + 1


def check_autosaves(autosaves: list[Autosave], verdict: Verdict) -> None:
    for save in autosaves:
        wrong = {q: v for q, v in save.acknowledged.items() if save.shown.get(q) != v}
        if wrong:
            verdict.add("autosave lost", save.record_id, f"acknowledged but not in the answers: {wrong}")


def check_jobs(observed: Observed, verdict: Verdict) -> None:
    for record_id in observed.job_index:
        if record_id not in observed.records:
            verdict.add(
                "orphan job", record_id, "a job in report:queue:jobs for a record that does not exist"
            )
    for record in observed.records.values():
        if record.status == STATUS_GENERATING and record.record_id not in observed.job_index:
            verdict.add(
                "owed without a job", record.record_id, "status 3 after settling, no job in report:queue:jobs"
            )


def check_leaks(processes: dict[int, tuple[str, list[Sample]]], verdict: Verdict) -> None:
    """Per process that lived long enough: the last quarter of its samples (after warm-up)
    by their median, against the first quarter's median (RSS) or the first half's most (fds,
    see FD_GROWTH_LIMIT)."""
    checked = 0
    for pid, (kind, samples) in processes.items():
        if not samples or samples[-1].at - samples[0].at < LEAK_MIN_SPAN_S:
            continue
        warm = [s for s in samples if s.at >= samples[0].at + WARMUP_S]
        quarter = max(1, len(warm) // 4)
        if len(warm) < 4:
            continue
        checked += 1
        first, last = warm[:quarter], warm[-quarter:]
        fd_growth = statistics.median(s.fds for s in last) - max(s.fds for s in warm[: len(warm) // 2])
        rss_first = statistics.median(s.rss_kb for s in first)
        rss_growth = statistics.median(s.rss_kb for s in last) - rss_first
        if fd_growth > FD_GROWTH_LIMIT:
            verdict.add("leak: fds", None, f"{kind} {pid}: open fds grew by {fd_growth:.0f}")
        if rss_growth > max(RSS_GROWTH_LIMIT_KB, RSS_GROWTH_LIMIT_RATIO * rss_first):
            verdict.add("leak: rss", None, f"{kind} {pid}: RSS grew by {rss_growth / 1024:.0f} MB")
    verdict.figures["processes_checked_for_leaks"] = checked
