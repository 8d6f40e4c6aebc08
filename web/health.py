"""Liveness and readiness probes (no authentication, no envelope data beyond the checks)."""

from __future__ import annotations

import redis
from flask import Blueprint, Response
from sqlalchemy import text

from services.errors import QueueUnavailable
from web.deps import current
from web.envelope import envelope, ok
from web.errors import RETRY_AFTER_S

bp = Blueprint("health", __name__)

#: Envelope code of a failed readiness probe (a dependency is unavailable).
NOT_READY_CODE = QueueUnavailable.code


@bp.get("/healthz")
def healthz() -> Response:
    """The process answers; deliberately no I/O, so a slow database never kills it."""
    return ok({"status": "ok"})


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
def readyz() -> Response:
    """Ready when PostgreSQL answers ``SELECT 1`` and Redis answers PING."""
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
    return ok(data)
