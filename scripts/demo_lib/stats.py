"""The figures of the demo's summary, computed from what the run saw."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scripts.demo_lib.simulation import RunState
from services.domain.status import RecordStatus


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Latency:
    p50: float
    p95: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Latency | None:
        """None when nothing was measured (no line is shown then)."""
        if not values:
            return None
        return cls(percentile(values, 50), percentile(values, 95), max(values))


@dataclass(frozen=True)
class Summary:
    total: int
    submitted: int
    completed: int
    failed: int
    submitting_took: float
    #: submittedAt → completedAt, on the server's clock.
    server: Latency | None
    #: From the submission's answer to the poll that saw the report, on this machine's clock.
    seen_by_users: Latency | None
    errors: tuple[str, ...]

    @property
    def still_generating(self) -> int:
        return self.submitted - self.completed - self.failed


def summarize(state: RunState) -> Summary:
    with state.lock:
        completed = [r for r, s in state.status.items() if s == RecordStatus.COMPLETED]
        failed = sum(1 for s in state.status.values() if s == RecordStatus.FAILED)
        seen = [state.done_at[r] - state.submitted_at[r] for r in completed if r in state.done_at]
        return Summary(
            total=state.total,
            submitted=len(state.submitted_at),
            completed=len(completed),
            failed=failed,
            submitting_took=state.submitting_took,
            server=Latency.of(list(state.server_latency.values())),
            seen_by_users=Latency.of(seen),
            errors=tuple(state.errors),
        )
