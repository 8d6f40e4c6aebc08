"""Who acts in the console: the signed-in admin, as the audit names them.

Every action of the console calls the same service function as the JSON admin API and the
CLI, with the queue operations and the audit log of web/deps.py, and this actor:
"console:<name>", credential the admin token's fingerprint (never the token).
"""

from __future__ import annotations

from services.domain.opsmodel import AdminActor
from web.console.signin import console_admin


def actor() -> AdminActor:
    admin = console_admin()
    return AdminActor(name=f"console:{admin.name}", credential=f"admin-token {admin.fingerprint}")
