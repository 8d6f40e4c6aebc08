"""The collaborators of a console action: who acts, the audit log, the queue's operations.

Every action of the console calls the same service function as the JSON admin API and the
CLI, with the signed-in admin as the actor: "console:<name>", credential the admin token's
fingerprint (never the token).
"""

from __future__ import annotations

from actors.adapters import RedisQueueOperations
from services.audit import DatabaseAuditLog
from services.opsmodel import AdminActor
from web.console.signin import console_admin
from web.deps import current, redis_client


def actor() -> AdminActor:
    admin = console_admin()
    return AdminActor(name=f"console:{admin.name}", credential=f"admin-token {admin.fingerprint}")


def audit_log() -> DatabaseAuditLog:
    """Written straight to PostgreSQL: an action whose audit cannot be written is refused."""
    return DatabaseAuditLog(current().session_factory)


def queue_operations() -> RedisQueueOperations:
    return RedisQueueOperations(redis_client())
