"""Who may use the console: sign-in with an admin token, a server-side session, sign-out.

The session lives in Redis (web/console/sessions.py); Flask's signed cookie (HttpOnly,
SameSite=Lax, Secure in production) only names it. Each request reads it back and checks
that its token's fingerprint is still one of ADMIN_TOKENS: signing out, or removing the
token from the configuration, ends it at once. Anonymous visitors of a page are sent to
the sign-in page; a form post without a session is 401; a user token (the mini-program's
credential) is 403 everywhere here.

Sign-in refuses a name the audit could not show as it is (services.domain.limits.admin_name:
printable, at most 32 characters, no control or bidi character) before anything else, then
compares the token in constant time (web/auth.py). A right token signs in at once, whatever
its address did before; a wrong one is counted against its address and answered 401, or 429
while the address waits (web/console/limits.py). Every attempt is counted in
`mi_console_signin_attempts_total` by outcome and written to the audit trail (a sign-in,
each wrong token answered 401, and refused ones at 1, 2, 4, 8 ... per address: bounded rows
for any rate of guessing); the wrong tokens of the last 15 minutes raise the alarm of every
signed-in page (`signin_alarm`). Without Redis there is no session store and no limit:
sign-in answers 503.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

import redis
from flask import (
    abort,
    flash,
    g,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask.typing import ResponseReturnValue
from prometheus_client import Counter
from werkzeug.wrappers import Response as WerkzeugResponse

from observability.pipeline_health import Alarm
from services.domain.errors import ServiceError
from services.domain.limits import MAX_ADMIN_NAME_LENGTH, admin_name
from services.domain.opsmodel import AuditEntry
from web.auth import bearer_token, is_admin_token, token_fingerprint, verify_user_token
from web.console.blueprint import bp, csrf
from web.console.limits import FORGET_AFTER_MS, SigninLimiter, WrongToken
from web.console.sessions import SessionStore
from web.deps import audit_log, current, keyspace, redis_client

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
MSG_CROSS_SITE = "拒绝来自其他网站的请求"
MSG_GUESSING = (
    "最近 {minutes} 分钟内有 {wrong} 次错误的管理员凭证登录尝试（其中 {refused} 次因过于频繁被拒绝，"
    "最近一次来自 {address}）：有人可能在猜测凭证。详见操作审计。"
)

#: Sign-in attempts by outcome: "ok", "wrong" (answered 401), "refused" (429). Fixed labels.
signin_attempts = Counter(
    "mi_console_signin_attempts_total", "Console sign-in attempts, by outcome.", ["outcome"]
)
#: The audit's actions of a sign-in (web/console/audit.py names them).
SIGNIN_ACTION = "signin"
WRONG_TOKEN_ACTION = "signin_wrong_token"  # noqa: S105 - an audit action, not a secret
REFUSED_ACTION = "signin_refused"


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
        if not same_origin():
            abort(403, MSG_CROSS_SITE)
        csrf.protect()
    return None


def same_origin() -> bool:
    """Whether a form post comes from a page of this console, as far as the browser says.

    `Sec-Fetch-Site` (every current browser sends it, and no page can change it) must be
    `same-origin` (or `none`: typed or bookmarked); without it, an `Origin` must name this
    request's host (any scheme: a TLS proxy may leave the scheme unsaid) and `null` never
    does. A request with neither (an old browser, a script) is judged by its CSRF token
    alone. So a token read from a page does not let another site post with it."""
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site is not None:
        return fetch_site in {"same-origin", "none"}
    origin = request.headers.get("Origin")
    return origin is None or urlsplit(origin).netloc == request.host


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


def _audit(action: str, actor: str, credential: str, outcome: str, detail: str | None = None) -> None:
    """One finished entry of the audit trail (services/usecases/audit.py). A sign-in is not an
    action the audit must precede: an entry that cannot be written is logged, nothing refused."""
    entry = AuditEntry(
        at=datetime.now(UTC),
        actor=actor,
        credential=credential,
        action=action,
        ids=[],
        outcome=outcome,
        detail=detail,
    )
    try:
        audit_log().begin(entry)
    except ServiceError as exc:
        log.warning("console sign-in: audit entry %s not written: %s", action, exc)


def _audit_wrong_token(name: str, address: str, answer: WrongToken) -> None:
    """Each wrong token answered 401 (a few per address and wait), and those refused at the
    1st, 2nd, 4th, 8th ... of the address: rows grow with the log of a guesser's rate."""
    actor, credential = f"console:{name}", f"address {address}"
    if answer.answered:
        _audit(
            WRONG_TOKEN_ACTION, actor, credential, "failed", f"wrong token #{answer.failures} of {address}"
        )
    elif answer.refused & (answer.refused - 1) == 0:
        _audit(
            REFUSED_ACTION,
            actor,
            credential,
            "refused",
            f"{answer.refused} wrong token(s) of {address} refused while it waits "
            f"({answer.failures} answered before)",
        )


def signin_alarm() -> Alarm | None:
    """The alarm of guessing (web/console/limits.py, `Guessing.alarming`), for the banner of every
    signed-in page; None when there is none or Redis cannot say."""
    try:
        guessing = SigninLimiter(redis_client(), keyspace().console).guessing()
    except redis.RedisError:
        return None  # the banner's own alarm says Redis is down
    if guessing is None or not guessing.alarming:
        return None
    return Alarm(
        "signin_guessing",
        MSG_GUESSING.format(
            minutes=FORGET_AFTER_MS // 60_000,
            wrong=guessing.wrong,
            refused=guessing.refused,
            address=guessing.last_address,
        ),
    )


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
    address = request.remote_addr or "unknown"
    if not is_admin_token(settings.admin_tokens, token):
        answer = SigninLimiter(redis_client(), keyspace().console).wrong_token(address)
        _audit_wrong_token(name, address, answer)
        if not answer.answered:
            signin_attempts.labels("refused").inc()
            seconds = max(1, math.ceil(answer.wait_s))
            log.warning("console sign-in refused from %s: wrong token while it waits %d s", address, seconds)
            return _login_page(
                429,
                error=MSG_TOO_MANY.format(seconds=seconds),
                next_url=next_url,
                name=name,
                headers={"Retry-After": str(seconds)},
            )
        signin_attempts.labels("wrong").inc()
        is_user = bool(token) and verify_user_token(settings.secret_key, token) is not None
        log.warning("console sign-in refused from %s: wrong token #%d", address, answer.failures)
        return _login_page(
            401, error=MSG_USER_TOKEN if is_user else MSG_BAD_TOKEN, next_url=next_url, name=name
        )
    fingerprint = token_fingerprint(token)
    # A new session: nothing of an earlier one (or of a planted cookie) carries over.
    previous = session.get(SESSION_ID)
    if isinstance(previous, str):
        session_store().end(previous)
    session.clear()
    session.permanent = True
    session[SESSION_ID] = session_store().create(fingerprint, name)
    signin_attempts.labels("ok").inc()
    log.info("console sign-in of %r with admin token %s from %s", name, fingerprint, address)
    _audit(SIGNIN_ACTION, f"console:{name}", f"admin-token {fingerprint}", "ok", f"from {address}")
    return redirect(next_url)


@bp.post("/logout")
def sign_out() -> WerkzeugResponse:
    session_id = session.get(SESSION_ID)
    if isinstance(session_id, str):
        session_store().end(session_id)
    session.clear()
    flash(MSG_SIGNED_OUT, "info")
    return redirect(url_for("console.sign_in"))
