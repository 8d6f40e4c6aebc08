"""Who may use the console: sign-in with an admin token, a server-side session, sign-out.

The session lives in Redis (web/console/sessions.py); Flask's signed cookie (HttpOnly,
SameSite=Lax, Secure in production) only names it. Each request reads it back and checks
that its token's fingerprint is still one of ADMIN_TOKENS: signing out, or removing the
token from the configuration, ends it at once. Anonymous visitors of a page are sent to
the sign-in page; a form post without a session is 401; a user token (the mini-program's
credential) is 403 everywhere here.

Sign-in compares in constant time (web/auth.py), refuses a name the audit could not
show as it is (services.domain.limits.admin_name: printable, at most 32 characters, no control
or bidi character) before anything else, and is limited per client address and per
credential with a growing wait (web/console/limits.py, one Lua step in Redis). Without
Redis there is no session store and no limit: sign-in answers 503.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from urllib.parse import urlsplit

from flask import (
    abort,
    current_app,
    flash,
    g,
    make_response,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask.typing import ResponseReturnValue
from werkzeug.wrappers import Response as WerkzeugResponse

from services.domain.limits import MAX_ADMIN_NAME_LENGTH, admin_name
from web.auth import bearer_token, is_admin_token, token_fingerprint, verify_user_token
from web.console.blueprint import bp, csrf
from web.console.devices import device_fingerprint, remember_device
from web.console.limits import SigninLimiter
from web.console.sessions import SessionStore
from web.deps import current, keyspace, redis_client

log = logging.getLogger(__name__)

#: Endpoints open without a session: the sign-in page and the style sheet it uses.
PUBLIC_ENDPOINTS = frozenset({"console.sign_in", "console.static"})
#: Longest name an admin may give themselves for the audit.
MAX_NAME_LENGTH = MAX_ADMIN_NAME_LENGTH
#: What the audit calls an admin who gave no name.
DEFAULT_NAME = "管理员"
#: The Flask session's key naming the server-side session.
SESSION_ID = "sid"

MSG_BAD_TOKEN = "管理员凭证无效"  # noqa: S105 - a message, not a secret
MSG_USER_TOKEN = "用户凭证不能用于管理后台"  # noqa: S105 - a message, not a secret
MSG_TOO_MANY = "登录尝试过于频繁，请 {seconds} 秒后再试"
MSG_BAD_NAME = f"称呼须为 1 到 {MAX_NAME_LENGTH} 个可显示的字符，不能含控制字符或文字方向控制符"
MSG_DISABLED = "管理后台未启用：服务端未配置 ADMIN_TOKENS 或 SECRET_KEY"
MSG_SIGNED_OUT = "已退出登录"


@dataclass(frozen=True)
class ConsoleAdmin:
    #: What the admin called themselves at sign-in ("管理员" when they gave nothing).
    name: str
    #: The admin token's fingerprint (web/auth.py): which credential, never the secret.
    fingerprint: str


def session_store() -> SessionStore:
    return SessionStore(redis_client(), keyspace().console)


def signed_in_admin() -> ConsoleAdmin | None:
    """The admin of this request's live session if their token is still configured, else None."""
    session_id = session.get(SESSION_ID)
    if not isinstance(session_id, str):
        return None
    stored = session_store().get(session_id)
    if stored is None:
        return None
    if stored.fingerprint not in {token_fingerprint(t) for t in current().settings.admin_tokens}:
        return None
    return ConsoleAdmin(name=stored.name, fingerprint=stored.fingerprint)


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
        # web/event_logging.py names the actor of the events this request logs from it.
        g.admin_fingerprint = admin.fingerprint
    if request.method not in {"GET", "HEAD", "OPTIONS"}:
        csrf.protect()
    return None


def _safe_next(target: str | None) -> str:
    """Only a path of this console: an open redirect would make the sign-in page a phishing
    aid, and a control character (CR LF) would not fit in a Location header."""
    default = url_for("console.overview")
    if not target or not target.isprintable() or "\\" in target:
        return default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith(bp.url_prefix or "/admin"):
        return default
    return target


def _attempt_bucket() -> tuple[str, bool]:
    """Where this attempt is counted: its credential's bucket for a browser holding a device
    cookie of a token still configured, else its address's; and whether it is a credential's."""
    keys = keyspace().console
    settings = current().settings
    fingerprint = device_fingerprint(settings.secret_key)
    if fingerprint is not None and fingerprint in {token_fingerprint(t) for t in settings.admin_tokens}:
        return keys.signin_credential(fingerprint), True
    return keys.signin_address(request.remote_addr or "unknown"), False


def _login_page(
    status: int, *, error: str, next_url: str, name: str, headers: dict[str, str] | None = None
) -> ResponseReturnValue:
    body = render_template("console/login.html", error=error, next=next_url, name=name)
    return body, status, headers or {}


@bp.route("/login", methods=["GET", "POST"])
def sign_in() -> ResponseReturnValue:
    settings = current().settings
    next_url = _safe_next(request.values.get("next"))
    if request.method == "GET":
        if signed_in_admin() is not None:
            return redirect(next_url)
        return render_template("console/login.html", error=None, next=next_url)
    token = request.form.get("token", "").strip()
    typed_name = request.form.get("name", "")
    name = admin_name(typed_name)
    if name is None:
        # Not a guess: refused before the limit counts it, and nothing of it is echoed back.
        return _login_page(400, error=MSG_BAD_NAME, next_url=next_url, name="")
    name = name or DEFAULT_NAME
    bucket, per_credential = _attempt_bucket()
    limiter = SigninLimiter(redis_client())
    admission = limiter.admit(bucket)
    if not admission.allowed:
        seconds = max(1, math.ceil(admission.retry_after_s))
        log.warning(
            "console sign-in from %s refused unevaluated: retry in %d s", request.remote_addr, seconds
        )
        return _login_page(
            429,
            error=MSG_TOO_MANY.format(seconds=seconds),
            next_url=next_url,
            name=name,
            headers={"Retry-After": str(seconds)},
        )
    if not is_admin_token(settings.admin_tokens, token):
        is_user = bool(token) and verify_user_token(settings.secret_key, token) is not None
        log.warning("console sign-in refused from %s", request.remote_addr)
        return _login_page(
            401, error=MSG_USER_TOKEN if is_user else MSG_BAD_TOKEN, next_url=next_url, name=name
        )
    fingerprint = token_fingerprint(token)
    if per_credential:
        limiter.reset(bucket)
    # A new session: nothing of an earlier one (or of a planted cookie) carries over.
    previous = session.get(SESSION_ID)
    if isinstance(previous, str):
        session_store().end(previous)
    session.clear()
    session.permanent = True
    session[SESSION_ID] = session_store().create(fingerprint, name)
    log.info("console sign-in of %r with admin token %s", name, fingerprint)
    response = make_response(redirect(next_url))
    secure = bool(current_app.config.get("SESSION_COOKIE_SECURE"))
    remember_device(response, settings.secret_key, fingerprint, secure=secure)
    return response


@bp.post("/logout")
def sign_out() -> WerkzeugResponse:
    session_id = session.get(SESSION_ID)
    if isinstance(session_id, str):
        session_store().end(session_id)
    session.clear()
    flash(MSG_SIGNED_OUT, "info")
    return redirect(url_for("console.sign_in"))
