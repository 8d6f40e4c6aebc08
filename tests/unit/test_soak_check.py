"""The soak's checker can fail: each promise, broken in planted data, is reported (bench/soak_check.py)."""

from __future__ import annotations

import itertools

from bench.soak_check import (
    Accepted,
    Autosave,
    EventRow,
    Observed,
    Sample,
    StoredRecord,
    Verdict,
    check,
)

ANSWERS = {101 + n: 1 + n % 5 for n in range(40)}
_ids = itertools.count(1)


def event(kind: str, at: float, record_id: int = 1, **data: object) -> EventRow:
    return EventRow(f"e{next(_ids)}", kind, at, record_id, dict(data))


def healthy_events(record_id: int = 1, t0: float = 1000.0) -> list[EventRow]:
    return [
        event("record.created", t0, record_id),
        event("record.started", t0 + 1, record_id),
        event("answers.submitted", t0 + 2, record_id),
        event("report.generated", t0 + 2.5, record_id, attempt=1),
    ]


def drilled_events(t0: float = 1000.0) -> list[EventRow]:
    """Four failed attempts on the 10/30/60 s schedule, then the dead letter."""
    return [
        event("record.created", t0),
        event("record.started", t0 + 1),
        event("answers.submitted", t0 + 2),
        event("report.generation_failed", t0 + 2.1, attempt=1),
        event("report.generation_failed", t0 + 12.2, attempt=2),
        event("report.generation_failed", t0 + 42.3, attempt=3),
        event("report.generation_failed", t0 + 102.4, attempt=4),
        event("report.dead_lettered", t0 + 102.5, statusSet=True),
    ]


def observed(
    events: list[EventRow],
    *,
    status: int = 4,
    reports: int = 1,
    drilled: bool = False,
    answered: bool = True,
    **more: object,
) -> Observed:
    record = StoredRecord(1, status, reports, 8 * reports, dict(ANSWERS), completed_at=1002.5)
    return Observed(
        accepted=[Accepted(1, dict(ANSWERS), drilled, 1003.0, answered=answered)],
        records={1: record},
        events=events,
        job_index={},
        **more,  # type: ignore[arg-type]
    )


def kinds(verdict: Verdict) -> set[str]:
    return {v.kind for v in verdict.violations}


def test_a_healthy_run_passes() -> None:
    verdict = check(observed(healthy_events()))
    assert verdict.violations == []
    assert verdict.figures["completed"] == 1
    assert verdict.figures["lost"] == 0


def test_a_drilled_record_dead_lettered_on_schedule_passes() -> None:
    verdict = check(observed(drilled_events(), status=5, reports=0, drilled=True))
    assert verdict.violations == []
    assert verdict.figures["retries_on_time"] == 3


def test_an_attempt_stamped_before_its_submission_fails() -> None:
    """The submission's event carries its transaction's time (it commits with it), so nothing
    of its job can come first; the checker once put such starts back in front (they were
    logged after the job was queued) and so could not see this."""
    events = healthy_events()
    events[3] = event("report.generated", 1001.9, attempt=1)
    assert "status went back" in kinds(check(observed(events)))


def test_a_duplicate_report_fails() -> None:
    events = [*healthy_events(), event("report.generated", 1010.0, attempt=1)]
    assert "duplicate report" in kinds(check(observed(events)))


def test_a_stored_second_report_row_fails() -> None:
    assert "report" in kinds(check(observed(healthy_events(), reports=2)))


def test_a_status_that_goes_back_fails() -> None:
    events = [*healthy_events(), event("report.failure_recorded", 1010.0)]
    assert "status went back" in kinds(check(observed(events)))


def test_a_lost_submission_fails() -> None:
    verdict = check(observed(healthy_events()[:3], status=3, reports=0))
    assert {"lost", "owed without a job"} <= kinds(verdict)
    assert verdict.figures["lost"] == 1


def test_a_failed_record_that_was_never_drilled_fails() -> None:
    assert "false failure" in kinds(check(observed(drilled_events(), status=5, reports=0)))


def test_an_early_retry_fails() -> None:
    events = drilled_events()
    events[4] = event("report.generation_failed", 1005.0, attempt=2)  # 2.9 s after attempt 1
    assert "retry early" in kinds(check(observed(events, status=5, reports=0, drilled=True)))


def test_a_late_retry_fails_without_a_fault_and_is_excused_by_one() -> None:
    events = drilled_events()
    events[4] = event("report.generation_failed", 1030.0, attempt=2)  # 18 s late
    events[5] = event("report.generation_failed", 1060.1, attempt=3)
    events[6] = event("report.generation_failed", 1120.2, attempt=4)
    events[7] = event("report.dead_lettered", 1120.3, statusSet=True)
    assert kinds(check(observed(events, status=5, reports=0, drilled=True))) == {"retry late"}
    excused = check(
        observed(events, status=5, reports=0, drilled=True, faults=[(1010.0, 1012.0, "stop:worker")])
    )
    assert excused.violations == []
    assert excused.figures["retries_late_under_fault"] == 1


def test_an_attempt_beyond_the_budget_fails() -> None:
    events = [*drilled_events()[:7], event("report.generation_failed", 1170.0, attempt=5)]
    events.append(event("report.dead_lettered", 1170.1, statusSet=True))
    assert "attempt budget" in kinds(check(observed(events, status=5, reports=0, drilled=True)))


def test_a_dead_letter_before_the_newest_jobs_last_attempt_fails() -> None:
    """Regenerated while its old job was retrying: the old job's dead letter must not decide."""
    events = [
        *drilled_events()[:5],  # attempts 1 and 2 of the first job
        event("report.regenerated", 1020.0),
        event("report.generation_failed", 1020.1, attempt=1),  # the new job
        event("report.generation_failed", 1042.3, attempt=3),  # the old job goes on
        event("report.generation_failed", 1102.4, attempt=4),
        event("report.dead_lettered", 1102.5, statusSet=True),
    ]
    verdict = check(observed(events, status=5, reports=0, drilled=True, regenerated_in_flight={1}))
    assert "dead letter before the last attempt" in kinds(verdict)


def test_a_short_chain_fails_unless_it_is_a_poison_pill_with_as_many_kills() -> None:
    """Lost deliveries spend no attempt (listbroker.retries), so a dead letter after attempts
    1 and 4 only is a violation, kills or not. A poison pill (the broker dead-lettered a job
    lost with its worker more than its allowance; its event says `lostDeliveries`) is listed
    apart when as many worker SIGKILLs fall between the start and the dead letter, not with fewer."""
    short = [e for e in drilled_events() if e.data.get("attempt") not in (2, 3)]
    kills = [(1020.0, 1020.0, "kill:worker"), (1060.0, 1060.0, "kill:supervisor")]
    assert "dead letter before the last attempt" in kinds(
        check(observed(short, status=5, reports=0, drilled=True, faults=kills))
    )
    poison = [
        *drilled_events()[:4],  # attempt 1 failed
        event("report.dead_lettered", 1090.0, lostDeliveries=2, statusSet=True),
    ]
    verdict = check(observed(poison, status=5, reports=0, drilled=True, faults=kills))
    assert "dead letter before the last attempt" not in kinds(verdict)
    assert verdict.figures["poison_pills"] == [
        "record 1: lost with its worker 2 times; 2 worker kill(s) in between"
    ]
    assert "dead letter before the last attempt" in kinds(
        check(observed(poison, status=5, reports=0, drilled=True, faults=kills[:1]))
    )
    # A stop (SIGSTOP) ends no delivery: it does not count.
    stops = [(1020.0, 1030.0, "stop:worker"), (1060.0, 1070.0, "stop:worker")]
    assert "dead letter before the last attempt" in kinds(
        check(observed(poison, status=5, reports=0, drilled=True, faults=stops))
    )


def test_a_failed_attempt_after_the_record_was_settled_fails() -> None:
    events = [*drilled_events(), event("report.generation_failed", 1110.0, attempt=2)]
    assert "failed a finished record" in kinds(check(observed(events, status=5, reports=0, drilled=True)))


def test_an_event_stored_twice_or_missing_fails() -> None:
    events = healthy_events()
    assert "duplicate event" in kinds(check(observed([*events, events[2]])))
    unsubmitted = [e for e in events if e.type != "answers.submitted"]
    assert "missing event" in kinds(check(observed(unsubmitted)))
    # Even a submission whose answer was lost has its event: it commits with the submission.
    assert "missing event" in kinds(check(observed(unsubmitted, answered=False)))


def test_a_lost_autosave_and_an_orphan_job_fail() -> None:
    data = observed(healthy_events(), autosaves=[Autosave(9, {101: 3, 102: 4}, {101: 3})])
    data.job_index = {77: "1"}
    assert {"autosave lost", "orphan job"} <= kinds(check(data))


def test_growing_fds_and_rss_are_leaks() -> None:
    flat = [Sample(float(t), 100_000, 40) for t in range(0, 300, 5)]
    growing = [Sample(float(t), 100_000 + t * 1000, 40 + t // 2) for t in range(0, 300, 5)]
    verdict = check(observed(healthy_events(), processes={1: ("worker", flat), 2: ("web", growing)}))
    assert kinds(verdict) == {"leak: fds", "leak: rss"}
    assert verdict.figures["processes_checked_for_leaks"] == 2


def test_a_pool_opening_its_connections_once_is_not_a_leak() -> None:
    """A step of fds early (a pool opening its connections at the first fault) that stays
    flat is bounded; the same step and then steady growth is a leak."""
    step = [Sample(float(t), 100_000, 40 if t < 100 else 75) for t in range(0, 300, 5)]
    step_then_growing = [
        Sample(float(t), 100_000, 40 if t < 100 else 75 + max(0, t - 150) // 3) for t in range(0, 300, 5)
    ]
    verdict = check(
        observed(healthy_events(), processes={1: ("web", step), 2: ("worker", step_then_growing)})
    )
    assert [v.detail for v in verdict.violations] == ["worker 2: open fds grew by 35"]


def test_a_regeneration_while_a_job_retries_is_two_jobs_not_an_early_retry() -> None:
    events = [
        *drilled_events()[:4],  # attempt 1 of the first job failed at 1002.1
        event("report.regenerated", 1005.0, batch=True),  # a batch took it while it waited
        event("report.generation_failed", 1005.1, attempt=1),  # the new job
        event("report.generation_failed", 1012.2, attempt=2),  # the old one, on time
        event("report.generated", 1015.2, attempt=2),  # the new one, drill over
    ]
    assert check(observed(events, drilled=True)).violations == []


def test_a_missing_report_event_is_a_violation_even_after_a_worker_kill() -> None:
    """A worker killed between a report's commit and its event no longer excuses the gap: the
    redelivered job finds the report and logs its event (actors/report.py)."""
    events = healthy_events()[:3]  # status 4, report.generated never logged
    assert "missing event" in kinds(check(observed(events)))
    killed = check(observed(events, faults=[(1003.0, 1003.0, "kill:worker")]))
    assert "missing event" in kinds(killed)
    assert "events_lost_with_a_killed_worker" not in killed.figures


def test_a_regeneration_the_queue_refused_leaves_the_old_jobs_chain_whole() -> None:
    """Reset while its job retried, the new job refused by the queue (`enqueued: false`): the old
    job goes on and its dead letter after a full chain decides (found by the soak: the chain was
    cut at the reset and read as a dead letter before the last attempt). Queued, the same reset
    starts a new job, and the old chain's end is then one."""
    chain = drilled_events()
    refused = [*chain[:5], event("report.regenerated", 1030.0, batch=True, enqueued=False), *chain[5:]]
    assert check(observed(refused, status=5, reports=0, drilled=True)).violations == []
    queued = [*chain[:5], event("report.regenerated", 1030.0, batch=True, enqueued=True), *chain[5:]]
    assert "dead letter before the last attempt" in kinds(
        check(observed(queued, status=5, reports=0, drilled=True, regenerated_in_flight={1}))
    )


def test_a_new_jobs_first_attempt_logged_just_before_its_restart_event_is_the_new_jobs() -> None:
    """The reconciler's requeue is logged after its job is queued; the job's drilled first
    attempt failed 87 ms before that event (record 9697 of the 60-minute soak): the new job's
    chain is whole, and so is the old one's. A regeneration's event commits with its reset,
    before its job exists: an attempt before it is never its job's."""
    events = [
        *drilled_events()[:5],  # the old job's attempts 1 and 2, then it was lost
        event("report.generation_failed", 1130.6, attempt=1),  # the new job's first attempt
        event("report.requeued", 1130.7, reason="no job alive in Redis"),
        event("report.generation_failed", 1141.3, attempt=2),
        event("report.generation_failed", 1176.9, attempt=3),
        event("report.generation_failed", 1237.2, attempt=4),
        event("report.dead_lettered", 1237.3, statusSet=True),
    ]
    assert check(observed(events, status=5, reports=0, drilled=True)).violations == []
    # Two seconds before its restart event, an attempt 1 is not the new job's.
    late = [*events[:5], event("report.generation_failed", 1128.6, attempt=1), *events[6:]]
    assert "dead letter before the last attempt" in kinds(
        check(observed(late, status=5, reports=0, drilled=True))
    )
    regenerated = [*events[:6], event("report.regenerated", 1130.7, batch=True), *events[7:]]
    assert "dead letter before the last attempt" in kinds(
        check(observed(regenerated, status=5, reports=0, drilled=True))
    )
