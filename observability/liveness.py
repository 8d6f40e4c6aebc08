"""The process registry: who is running (workers, hotpath, reconciler, web), where, and doing what.

One Redis hash, `processes:beats`: field `<kind>:<host>:<pid>`, value a JSON object
(kind, host, pid, version, started_at, last_seen, doing; times in epoch seconds). Each
process rewrites its own field every `BEAT_INTERVAL_S` (observability/heartbeat.py); a
reader calls a process alive while its last beat is younger than `BEAT_TIMEOUT_S`.
A process that stopped cleanly says so in its last beat (`stopped`); one that went silent
without it (crash, kill, host lost) is gone. Both stay listed, not alive, until
`PRUNE_AFTER_S`; then any writer removes them, so the hash stays bounded by the processes
of the last hour.

This is separate from the broker's `broker:heartbeats` (a sorted set of consumer ids for
its reaper): that one decides whose messages to give back, this one is for operators.
Times are the writers' and the reader's clocks: hosts are expected to run NTP, and a
skew of a few seconds is small against the timeout.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from importlib import metadata

import redis

from redis_adapters.keyspace import PROCESS_BEATS_KEY
from services.domain.limits import is_strict_int

#: The registry hash.
BEATS_KEY = PROCESS_BEATS_KEY
#: How often a process rewrites its beat.
BEAT_INTERVAL_S = 5.0
#: A process whose last beat is older than this is shown as gone (six missed beats).
BEAT_TIMEOUT_S = 30.0
#: A stopped or gone process is removed from the registry this long after its last beat.
PRUNE_AFTER_S = 3600.0
#: What a process that stopped cleanly says it is doing: shown as stopped (not lost), not alive.
STOPPED = "stopped"
#: The process kinds that write beats.
KINDS = ("worker", "hotpath", "reconciler", "web")
#: Kinds the pipeline cannot do without: with none of them alive, reports stop being made
#: (worker) or answers and events stop reaching PostgreSQL (hotpath). `/healthz/workers`
#: answers 503 and the console raises its alarm.
REQUIRED_KINDS = ("worker", "hotpath")


class ProcessState(StrEnum):
    ALIVE = "alive"  # beating within the timeout
    STOPPED = "stopped"  # exited cleanly (its last beat said so): nothing was lost
    GONE = "gone"  # silent past the timeout without a clean exit: crashed, killed or host lost


@dataclass(frozen=True)
class ProcessBeat:
    kind: str  # "worker" | "hotpath" | "reconciler" | "web"
    host: str
    pid: int
    version: str  # the package version
    started_at: datetime  # aware UTC
    last_seen: datetime  # aware UTC
    doing: str  # what it is running now (e.g. "report 42", "idle", "flushing answers")
    alive: bool  # last_seen within the heartbeat timeout (and not stopped)
    #: Jobs running now and threads to run them (worker processes only; None for others).
    busy: int | None = None
    capacity: int | None = None

    @property
    def field(self) -> str:
        return beat_field(self.kind, self.host, self.pid)

    @property
    def state(self) -> ProcessState:
        if self.alive:
            return ProcessState.ALIVE
        return ProcessState.STOPPED if self.doing == STOPPED else ProcessState.GONE


def beat_field(kind: str, host: str, pid: int) -> str:
    return f"{kind}:{host}:{pid}"


def package_version() -> str:
    try:
        return metadata.version("mi-assessment")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


@dataclass(frozen=True)
class ProcessIdentity:
    """What a process says about itself in every beat."""

    kind: str
    host: str
    pid: int
    version: str
    started_at: float  # epoch seconds

    @classmethod
    def current(cls, kind: str) -> ProcessIdentity:
        if kind not in KINDS:
            raise ValueError(f"process kind must be one of {', '.join(KINDS)}, got {kind!r}")
        return cls(kind, socket.gethostname(), os.getpid(), package_version(), time.time())

    @property
    def field(self) -> str:
        return beat_field(self.kind, self.host, self.pid)


def write_beat(
    client: redis.Redis,
    identity: ProcessIdentity,
    doing: str,
    *,
    now: float | None = None,
    load: tuple[int, int] | None = None,
) -> None:
    """One HSET of this process's field (its whole state: a lost beat is repaired by the next).
    `load`: (jobs running, threads) of a worker process."""
    value: dict[str, object] = {
        "kind": identity.kind,
        "host": identity.host,
        "pid": identity.pid,
        "version": identity.version,
        "started_at": identity.started_at,
        "last_seen": time.time() if now is None else now,
        "doing": doing,
    }
    if load is not None:
        value["busy"], value["capacity"] = load
    client.hset(BEATS_KEY, identity.field, json.dumps(value, ensure_ascii=False))


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _parse(raw: bytes | str, now: float) -> ProcessBeat | None:
    try:
        value = json.loads(raw)
        last_seen = float(value["last_seen"])
        doing = str(value["doing"])
        return ProcessBeat(
            kind=str(value["kind"]),
            host=str(value["host"]),
            pid=int(value["pid"]),
            version=str(value["version"]),
            started_at=_utc(float(value["started_at"])),
            last_seen=_utc(last_seen),
            doing=doing,
            alive=doing != STOPPED and now - last_seen <= BEAT_TIMEOUT_S,
            busy=_optional_int(value.get("busy")),
            capacity=_optional_int(value.get("capacity")),
        )
    except (ValueError, KeyError, TypeError, OverflowError, OSError, RecursionError):
        # Not ours, from another version, or a time no calendar holds (last_seen 1e300):
        # left out of the list (counted by `unreadable_beats`), pruned by prune_beats.
        return None


def _optional_int(value: object) -> int | None:
    return value if is_strict_int(value) and value >= 0 else None


def live_processes(client: redis.Redis, *, now: float | None = None) -> list[ProcessBeat]:
    """Every registered process, stopped and gone ones included (alive=False) until pruned; sorted
    by kind, host, pid."""
    now = time.time() if now is None else now
    beats = [_parse(raw, now) for raw in client.hvals(BEATS_KEY)]
    return sorted((b for b in beats if b is not None), key=lambda b: (b.kind, b.host, b.pid))


def unreadable_beats(client: redis.Redis, *, now: float | None = None) -> int:
    """How many fields of the registry cannot be read as a beat (shown as such to operators)."""
    now = time.time() if now is None else now
    return sum(1 for raw in client.hvals(BEATS_KEY) if _parse(raw, now) is None)


def prune_beats(client: redis.Redis, *, now: float | None = None) -> int:
    """Remove the fields of processes gone longer than `PRUNE_AFTER_S` (and unreadable ones)."""
    now = time.time() if now is None else now
    stale: list[bytes | str] = []
    for field, raw in client.hgetall(BEATS_KEY).items():
        beat = _parse(raw, now)
        if beat is None or now - beat.last_seen.timestamp() > PRUNE_AFTER_S:
            stale.append(field)
    return int(client.hdel(BEATS_KEY, *stale)) if stale else 0
