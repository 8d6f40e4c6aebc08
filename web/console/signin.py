"""Who may use the console: sign-in with an admin token, a session cookie, sign-out.

The session (Flask's signed cookie, HttpOnly, SameSite=Lax, Secure in production) holds
the token's fingerprint, never the token: each request checks that the fingerprint is
still one of ADMIN_TOKENS, so removing a token from the configuration signs its sessions
out. Anonymous visitors of a page are sent to the sign-in page; a form post without a
session is 401; a user token (the mini-program's credential) is 403 everywhere here.

Sign-in compares in constant time (web/auth.py) and counts failures per client address
in Redis: after `MAX_FAILURES` within `FAILURE_WINDOW_S` that address is refused until
the window passes. If Redis is down the count is skipped (the comparison stays
constant-time), so an outage of the queue does not lock the operators out.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import redis
from flask import abort, flash, g, redirect, render_template, request, session, url_for
from flask.typing import ResponseReturnValue
from werkzeug.wrappers import Response as WerkzeugResponse

from web.auth import bearer_token, is_admin_token, token_fingerprint, verify_user_token
from web.console.blueprint import bp, csrf
from web.deps import current, redis_client

log = logging.getLogger(__name__)

#: Endpoints open without a session: the sign-in page and the style sheet it uses.
PUBLIC_ENDPOINTS = frozenset({"console.sign_in", "console.static"})
#: Failed sign-ins allowed per client address within the window.
MAX_FAILURES = 10
FAILURE_WINDOW_S = 300
FAILURES_KEY_PREFIX = "console:signin:failures:"
#: Longest name an admin may give themselves for the audit.
MAX_NAME_LENGTH = 32

MSG_BAD_TOKEN = "管理员凭证无效"  # noqa: S105 - a message, not a secret
MSG_USER_TOKEN = "用户凭证不能用于管理后台"  # noqa: S105 - a message, not a secret
MSG_TOO_MANY = "登录失败次数过多，请稍后再试"
MSG_DISABLED = "管理后台未启用：服务端未配置 ADMIN_TOKENS 或 SECRET_KEY"
MSG_SIGNED_OUT = "已退出登录"


@dataclass(frozen=True)
class ConsoleAdmin:
    #: What the admin called themselves at sign-in ("管理员" when they gave nothing).
    name: str
    #: The admin token's fingerprint (web/auth.py): which credential, never the secret.
    fingerprint: str


def signed_in_admin() -> ConsoleAdmin | None:
    """The admin of this session if their token is still configured, else None."""
    fingerprint = session.get("admin")
    name = session.get("name")
    if not isinstance(fingerprint, str) or not isinstance(name, str):
        return None
    if fingerprint not in {token_fingerprint(t) for t in current().settings.admin_tokens}:
        return None
    return ConsoleAdmin(name=name, fingerprint=fingerprint)


def console_admin() -> ConsoleAdmin:
    """The signed-in admin of this request (set by the guard)."""
    admin = g.get("console_admin")
    if not isinstance(admin, ConsoleAdmin):
        raise RuntimeError("console_admin() outside a console page")
    return admin


@bp.before_request
def guard() -> WerkzeugResponse | None:
    """Every console request: a user token is 403; no session is a redirect (pages) or 401
    (forms); then, for a form, its CSRF token (Flask-WTF; refused with 400)."""
    settings = current().settings
    token = bearer_token()
    if token is not None and verify_user_token(settings.secret_key, token) is not None:
        abort(403, MSG_USER_TOKEN)
    if not (settings.secret_key and settings.admin_tokens) and request.endpoint != "console.static":
        # No key to sign the session and the CSRF tokens with, or no token to sign in with.
        abort(503, MSG_DISABLED)
    if request.endpoint not in PUBLIC_ENDPOINTS:
        admin = signed_in_admin()
        if admin is None:
            if request.method in {"GET", "HEAD"}:
                return redirect(url_for("console.sign_in", next=request.full_path.rstrip("?")))
            abort(401)
        g.console_admin = admin
        # web/events.py names the actor of the events this request logs from it.
        g.admin_fingerprint = admin.fingerprint
    if request.method not in {"GET", "HEAD", "OPTIONS"}:
        csrf.protect()
    return None


def _safe_next(target: str | None) -> str:
    """Only a path of this console: an open redirect would make the sign-in page a phishing aid."""
    default = url_for("console.overview")
    if not target:
        return default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith(bp.url_prefix or "/admin"):
        return default
    return target


def _failures_key() -> str:
    return FAILURES_KEY_PREFIX + (request.remote_addr or "unknown")


def _too_many_failures() -> bool:
    try:
        count = redis_client().get(_failures_key())
    except redis.RedisError:
        return False
    return count is not None and int(count) >= MAX_FAILURES


def _count_failure() -> None:
    try:
        pipe = redis_client().pipeline()
        pipe.incr(_failures_key())
        pipe.expire(_failures_key(), FAILURE_WINDOW_S, nx=True)
        pipe.execute()
    except redis.RedisError:
        log.warning("could not count a failed console sign-in (Redis unavailable)")


@bp.route("/login", methods=["GET", "POST"])
def sign_in() -> ResponseReturnValue:
    settings = current().settings
    next_url = _safe_next(request.values.get("next"))
    if request.method == "GET":
        if signed_in_admin() is not None:
            return redirect(next_url)
        return render_template("console/login.html", error=None, next=next_url)
    token = request.form.get("token", "").strip()
    name = " ".join(request.form.get("name", "").split())[:MAX_NAME_LENGTH] or "管理员"
    error: str | None = None
    if _too_many_failures():
        error = MSG_TOO_MANY
    elif not is_admin_token(settings.admin_tokens, token):
        _count_failure()
        is_user = bool(token) and verify_user_token(settings.secret_key, token) is not None
        error = MSG_USER_TOKEN if is_user else MSG_BAD_TOKEN
        log.warning("console sign-in refused from %s", request.remote_addr)
    if error is not None:
        return render_template("console/login.html", error=error, next=next_url, name=name), 401
    # A new session: nothing of an earlier one (or of a planted cookie) carries over.
    session.clear()
    session.permanent = True
    session["admin"] = token_fingerprint(token)
    session["name"] = name
    session["since"] = int(time.time())
    log.info("console sign-in of %r with admin token %s", name, session["admin"])
    return redirect(next_url)


@bp.post("/logout")
def sign_out() -> WerkzeugResponse:
    session.clear()
    flash(MSG_SIGNED_OUT, "info")
    return redirect(url_for("console.sign_in"))
