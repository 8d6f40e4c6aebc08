"""Liveness and readiness probes (no authentication, no envelope data beyond the checks).

`/healthz/workers` says how many workers and hotpath processes beat (the process registry,
observability/liveness.py): counts only, since it is open to the anonymous; hosts, pids
and what each runs are for admins (the console). It is not part of `/readyz`: a web
process without workers still serves the API, and must stay in its load balancer.
"""

from __future__ import annotations

import redis
from flask import Blueprint
from sqlalchemy import text

from observability.liveness import KINDS, REQUIRED_KINDS, ProcessState, live_processes
from services.domain.errors import QueueUnavailable
from web.deps import current
from web.envelope import envelope
from web.errors import RETRY_AFTER_S
from web.response_models import Envelope, Health, Processes, Readiness
from web.spec import HEALTH, Reply, operation, success

bp = Blueprint("health", __name__)

#: Envelope code of a failed readiness probe (a dependency is unavailable).
NOT_READY_CODE = QueueUnavailable.code


@bp.get("/healthz")
@operation(Health, tag=HEALTH)
def healthz() -> Reply:
    """Liveness: the process answers (no I/O)

    Deliberately no I/O, so a slow database never kills it.
    """
    return success({"status": "ok"})


def _database_ok() -> bool:
    try:
        with current().session_factory() as session:
            session.execute(text("SELECT 1"))
    except Exception:  # any failure (driver, pool, DNS) means the same: not ready
        return False
    return True


def _redis_ok() -> bool:
    try:
        return bool(current().redis.ping())
    except (redis.RedisError, OSError):
        return False


@bp.get("/readyz")
@operation(
    Readiness,
    tag=HEALTH,
    others={503: (Envelope[Readiness], "5003: a dependency is unavailable; data names which")},
)
def readyz() -> Reply:
    """Readiness: PostgreSQL SELECT 1 and Redis PING"""
    checks = {"database": _database_ok(), "redis": _redis_ok()}
    data = {name: "ok" if passed else "unavailable" for name, passed in checks.items()}
    failed = [name for name, passed in checks.items() if not passed]
    if failed:
        return envelope(
            NOT_READY_CODE,
            "not ready: " + ", ".join(failed),
            data,
            status=503,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    return success(data)


@bp.get("/healthz/workers")
@operation(
    Processes,
    tag=HEALTH,
    others={
        503: (
            Envelope[Processes | None],
            "5003: no live worker or hotpath process (data: the counts) or Redis down",
        )
    },
)
def healthz_workers() -> Reply:
    """Processes in the registry, per kind (alive, gone, stopped); counts only

    503 when no worker or no hotpath process is alive. A process that exited cleanly is
    `stopped`, not `gone`: an alert on `gone > 0` fires for crashes and lost hosts, not for
    every restart.
    """
    try:
        beats = live_processes(current().redis)
    except (redis.RedisError, OSError):
        return envelope(
            NOT_READY_CODE,
            "not ready: redis",
            None,
            status=503,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    data = {
        kind: {
            state.value: sum(1 for b in beats if b.kind == kind and b.state is state)
            for state in ProcessState
        }
        for kind in KINDS
    }
    missing = [kind for kind in REQUIRED_KINDS if data[kind]["alive"] == 0]
    if missing:
        return envelope(
            NOT_READY_CODE,
            "not ready: no live " + ", ".join(missing),
            data,
            status=503,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    return success(data)
