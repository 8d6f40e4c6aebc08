"""The report actor (actors/report.py) settles each job by its outcome: a pure unit test, with
scripted outcomes and messages that record what they are told. The outcomes themselves, on the
real PostgreSQL: tests/integration/test_report_groups.py; the actor in a real worker:
tests/integration/test_report_worker.py and test_hotpath_worker_events.py."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest
from listbroker import DependencyUnavailable, ListMessageProxy

from actors import bootstrap, report
from redis_adapters.queues import REPORT_ACTOR_NAME
from services.domain.errors import ServiceError
from services.domain.events import Event, EventType
from services.usecases.drill import FaultDrillFailure
from services.usecases.report_groups import Job
from services.usecases.reports import Generation, GenerationOutcome

DRILLED_AT = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


@dataclass
class Message:
    """What the batch function uses of a `ListMessageProxy`; it records its settling in `log`."""

    args: tuple[object, ...]
    log: list[str]
    options: dict[str, Any] = field(default_factory=dict)
    actor_name: str = REPORT_ACTOR_NAME
    stuffed: BaseException | None = None
    done: bool = False

    @property
    def message_id(self) -> str:
        return f"m-{self.args[0] if self.args else '?'}"

    def stuff_exception(self, exc: BaseException) -> None:
        self.stuffed = exc
        self.log.append(f"stuffed {self.args[0]}")

    def mark_done(self) -> None:
        self.done = True
        self.log.append(f"done {self.args[0]}")


class ScriptedGroups:
    """`ReportGroups.generate` giving each record its scripted outcome, in `order` (record ids),
    then raising `interrupt` if set (a time limit striking the batch)."""

    def __init__(
        self,
        script: dict[int, Generation],
        log: list[str],
        *,
        order: Sequence[int] | None = None,
        interrupt: BaseException | None = None,
    ) -> None:
        self.script = script
        self.log = log
        self.order = order
        self.interrupt = interrupt
        self.jobs: list[Job] = []

    def generate(self, jobs: Sequence[Job]) -> Iterator[tuple[int, Generation]]:
        self.jobs = list(jobs)
        ids = [job.record_id for job in jobs]
        for record_id in self.order if self.order is not None else ids:
            self.log.append(f"outcome {record_id}")
            yield ids.index(record_id), self.script[record_id]
        if self.interrupt is not None:
            raise self.interrupt


class Sink:
    def __init__(self) -> None:
        self.calls: list[list[Event]] = []

    def emit_many(self, events: Sequence[Event]) -> None:
        self.calls.append(list(events))


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
def log() -> list[str]:
    return []


def install(monkeypatch: pytest.MonkeyPatch, groups: ScriptedGroups, sink: Sink) -> None:
    services = SimpleNamespace(report_groups=groups, events=sink)
    monkeypatch.setattr(bootstrap, "services", lambda: services)


def batch(messages: Sequence[Message]) -> None:
    report.generate_report_batch(cast(list[ListMessageProxy], list(messages)))


def failed(error: Exception, at: datetime | None = None) -> Generation:
    return Generation.failed(error, at=at)


GENERATED = Generation(GenerationOutcome.GENERATED, latency_s=1.5)
SKIPPED = Generation(GenerationOutcome.SKIPPED, detail="record in status 4")
UNKNOWN = Generation.unknown("database unreachable: connection refused")


def test_each_job_is_settled_by_its_own_outcome(
    monkeypatch: pytest.MonkeyPatch, sink: Sink, log: list[str]
) -> None:
    scoring = ServiceError("测评记录 3 的答案不完整")
    drill = FaultDrillFailure("故障演练：记录 4 的报告生成按演练设定失败")
    script = {1: GENERATED, 2: SKIPPED, 3: failed(scoring), 4: failed(drill, DRILLED_AT), 5: UNKNOWN}
    groups = ScriptedGroups(script, log)
    install(monkeypatch, groups, sink)
    messages = [Message((r,), log, options={"retry_count": r - 1}) for r in script]
    bad = Message(("x",), log)

    batch([*messages, bad])

    generated, skipped, scored, drilled, unknown = messages
    assert (generated.done, generated.stuffed) == (True, None)
    assert (skipped.done, skipped.stuffed) == (True, None)
    assert (scored.done, scored.stuffed) == (False, scoring)
    assert (drilled.done, drilled.stuffed) == (False, drill)
    assert not unknown.done
    assert isinstance(unknown.stuffed, DependencyUnavailable)  # back uncounted: not the record's failure
    assert str(unknown.stuffed) == UNKNOWN.detail
    assert isinstance(bad.stuffed, ValueError)  # not a record id: failed before generation
    assert groups.jobs == [Job(r, r) for r in script]  # each job's attempt: its retry count + 1
    # One event per failed attempt, in one call: its attempt, its error, its moment.
    [events] = sink.calls
    assert [(e.event_type, e.record_id, e.actor, e.data) for e in events] == [
        (
            EventType.REPORT_GENERATION_FAILED,
            3,
            "worker",
            {"attempt": 3, "error": f"ServiceError: {scoring}"},
        ),
        (
            EventType.REPORT_GENERATION_FAILED,
            4,
            "worker",
            {"attempt": 4, "error": f"FaultDrillFailure: {drill}"},
        ),
    ]
    assert events[1].occurred_at == DRILLED_AT  # when the drill decided
    assert events[0].occurred_at > DRILLED_AT


def test_a_job_is_settled_as_soon_as_its_outcome_is_known(
    monkeypatch: pytest.MonkeyPatch, sink: Sink, log: list[str]
) -> None:
    """A record run alone (locked elsewhere) may wait: the jobs whose outcomes came before are
    settled first, so a time limit striking during the wait is not their failure."""
    script = {1: GENERATED, 2: GENERATED, 3: SKIPPED}
    install(monkeypatch, ScriptedGroups(script, log, order=[1, 3, 2]), sink)
    batch([Message((r,), log) for r in script])
    assert log == ["outcome 1", "done 1", "outcome 3", "done 3", "outcome 2", "done 2"]


def test_a_batch_whose_every_job_is_unknown_goes_back_in_one_step(
    monkeypatch: pytest.MonkeyPatch, sink: Sink, log: list[str]
) -> None:
    """The database down for the whole batch: the batch raises DependencyUnavailable (every job
    back uncounted in one step, the gate closed: ExactRetries, AvailabilityGate), no job stuffed,
    no failure event."""
    install(monkeypatch, ScriptedGroups({1: UNKNOWN, 2: UNKNOWN}, log), sink)
    messages = [Message((r,), log) for r in (1, 2)]
    with pytest.raises(DependencyUnavailable, match="database unreachable"):
        batch(messages)
    assert [(m.done, m.stuffed) for m in messages] == [(False, None), (False, None)]
    assert sink.calls == []


def test_a_time_limit_striking_the_batch_keeps_the_outcomes_seen(
    monkeypatch: pytest.MonkeyPatch, sink: Sink, log: list[str]
) -> None:
    """Interrupted (a time limit): what was settled stays settled, the failures seen are logged,
    an unknown outcome seen is still given back uncounted; the rest fail with the interruption."""
    error = ServiceError("refused")
    script = {1: GENERATED, 2: failed(error), 3: UNKNOWN, 4: GENERATED}
    limit = TimeoutError("time limit exceeded")
    install(monkeypatch, ScriptedGroups(script, log, order=[1, 2, 3], interrupt=limit), sink)
    messages = [Message((r,), log) for r in script]
    with pytest.raises(TimeoutError):
        batch(messages)
    assert messages[0].done
    assert messages[1].stuffed is error
    assert isinstance(messages[2].stuffed, DependencyUnavailable)
    assert (messages[3].done, messages[3].stuffed) == (False, None)  # the broker fails it with the limit
    assert [[e.record_id for e in call] for call in sink.calls] == [[2]]


@pytest.mark.parametrize("outcome", ["generated", "skipped"])
def test_a_job_outside_a_batch_returns_when_done(
    monkeypatch: pytest.MonkeyPatch, sink: Sink, log: list[str], outcome: str
) -> None:
    generation = GENERATED if outcome == "generated" else SKIPPED
    groups = ScriptedGroups({7: generation}, log)
    install(monkeypatch, groups, sink)
    report.generate_report.fn(7)
    assert groups.jobs == [Job(7, None)]  # a batch of one; no attempt known outside a worker
    assert sink.calls == []


def test_a_job_outside_a_batch_raises_its_failure_and_logs_its_event(
    monkeypatch: pytest.MonkeyPatch, sink: Sink, log: list[str]
) -> None:
    drill = FaultDrillFailure("故障演练：记录 7 的报告生成按演练设定失败")
    install(monkeypatch, ScriptedGroups({7: failed(drill, DRILLED_AT)}, log), sink)
    with pytest.raises(FaultDrillFailure) as raised:
        report.generate_report.fn(7)
    assert raised.value is drill
    [[event]] = sink.calls
    assert (event.event_type, event.record_id, event.occurred_at) == (
        EventType.REPORT_GENERATION_FAILED,
        7,
        DRILLED_AT,
    )
    assert event.data == {"attempt": None, "error": f"FaultDrillFailure: {drill}"}


def test_a_job_outside_a_batch_with_an_unknown_outcome_goes_back_uncounted(
    monkeypatch: pytest.MonkeyPatch, sink: Sink, log: list[str]
) -> None:
    install(monkeypatch, ScriptedGroups({7: UNKNOWN}, log), sink)
    with pytest.raises(DependencyUnavailable, match="database unreachable"):
        report.generate_report.fn(7)
    assert sink.calls == []  # not a failed attempt
