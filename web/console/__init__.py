"""The admin console at /admin/: server-rendered pages for operators who are not developers.

Flask + Jinja, a small hand-written style sheet, no JavaScript build. Sign-in with an
admin token (signin.py), then: the overview (queue figures, processes, throughput),
records (filter, batch and single regenerate), a record's detail (answers, report, event
timeline), delayed retries (retry now, delete), dead letters (requeue, delete), invalid
payloads (view, delete, purge), the audit trail and the fault drill. Every signed-in
page carries the alarm banner (no worker or hotpath alive, a queue waiting too long).
Every action calls the same service function as the admin API and the CLI, audited with
the signed-in admin as the actor, and answers with a redirect (a batch's outcome on a page of
its own, outcomes.py), so that a reload never sends it again.
"""

from __future__ import annotations

from datetime import timedelta

from flask import Flask, Request
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface

from web.console import (
    audit,
    context,
    deadletters,
    delayed,
    drill,
    error_pages,
    headers,
    outcomes,
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
_VIEWS = (audit, context, deadletters, delayed, drill, error_pages, outcomes, overview, records, signin)


class ConsoleCookieSessions(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, opened only under the console's cookie path.

    The session cookie is the console's alone (`SESSION_COOKIE_PATH`): a browser sends it
    nowhere else, so a session opened for any other request (the user API, the admin API,
    the probes) is always empty. It is not opened there at all (Flask's null session, never
    saved): each API call then skips building the cookie's signer and reading the cookie
    (3 % of the web tier's CPU per submission in a profile of the user API)."""

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        path = self.get_cookie_path(app).rstrip("/")
        if request.path != path and not request.path.startswith(path + "/"):
            return self.make_null_session(app)
        return super().open_session(app, request)


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
    app.session_interface = ConsoleCookieSessions()
    csrf.init_app(app)
    app.register_blueprint(bp)
    headers.install(app)
