"""The admin console at /admin/: server-rendered pages for operators who are not developers.

Flask + Jinja, a small hand-written style sheet, no JavaScript build. Sign-in with an
admin token (signin.py), then: the overview (queue figures, processes, throughput),
records (filter, batch and single regenerate), a record's detail (answers, report, event
timeline), delayed retries (retry now, delete), dead letters (requeue, delete), invalid
payloads (view, delete, purge), the audit trail and the fault drill. Every signed-in
page carries the alarm banner (no worker or hotpath alive, a queue waiting too long).
Every action calls the same service function as the admin API and the CLI, audited with
the signed-in admin as the actor.
"""

from __future__ import annotations

from datetime import timedelta

from flask import Flask

from web.console import (
    audit,
    context,
    deadletters,
    delayed,
    drill,
    error_pages,
    headers,
    overview,
    records,
    sessions,
    signin,
)
from web.console.blueprint import bp, csrf

__all__ = ["init_app"]

#: A console session lasts a working day; then the admin signs in again.
SESSION_LIFETIME = timedelta(seconds=sessions.LIFETIME_S)

# The modules register their views on `bp` when imported.
_VIEWS = (audit, context, deadletters, delayed, drill, error_pages, overview, records, signin)


def init_app(app: Flask, *, production: bool) -> None:
    """Session cookie settings, CSRF, the blueprint. In production the cookie is Secure (sent
    over TLS only): production runs behind TLS."""
    app.config.update(
        SESSION_COOKIE_NAME="mi_admin_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=production,
        SESSION_COOKIE_PATH="/admin",
        PERMANENT_SESSION_LIFETIME=SESSION_LIFETIME,
        WTF_CSRF_CHECK_DEFAULT=False,
        # The token lives as long as the session; a page left open for an hour still posts.
        WTF_CSRF_TIME_LIMIT=None,
    )
    csrf.init_app(app)
    app.register_blueprint(bp)
    headers.install(app)
