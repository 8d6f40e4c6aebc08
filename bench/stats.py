"""Measurements: timing statistics, waiting for a condition, and Redis round trips and commands."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import redis


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest-rank on the sorted values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return float(ordered[rank - 1])


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


class RoundTripCounter:
    """Counts the requests redis-py sends from this process (a pipeline counts once)."""

    def __init__(self) -> None:
        self._ticks = itertools.count()  # next() is atomic under the GIL; += is not
        self._reads = 0
        self.installed = False

    def install(self) -> RoundTripCounter:
        if self.installed:
            return self
        from redis.connection import AbstractConnection

        original: Callable[..., None] = AbstractConnection.send_packed_command
        ticks = self._ticks

        def counting(conn: Any, command: Any, check_health: bool = True) -> None:
            next(ticks)
            original(conn, command, check_health)

        setattr(AbstractConnection, "send_packed_command", counting)  # noqa: B010
        self.installed = True
        return self

    @property
    def value(self) -> int:
        total = next(self._ticks) - self._reads
        self._reads += 1
        return total


def command_stats(client: redis.Redis) -> dict[str, int]:
    """Calls per command on the server (INFO commandstats), e.g. {'lpush': 3, 'evalsha': 10}."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def stats_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    return {k: v for k, v in sorted(delta.items()) if v}
