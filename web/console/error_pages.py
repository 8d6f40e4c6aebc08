"""Errors inside the console become a page, not the API's JSON envelope.

The statuses and texts are the API's (web/errors.py); only the form differs. A refused
CSRF token says so in words an admin understands (reload the page and try again). An action
refused by the services, or by a server that is down, is said on the page of its form, after
a redirect (POST, redirect, GET), so a reload does not send it again.
"""

from __future__ import annotations

import logging

from flask import flash, g, redirect, render_template, request, url_for
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response as WerkzeugResponse

from services.domain.errors import ServiceError
from web.console.blueprint import bp
from web.console.context import console_context
from web.console.signin import signed_in_admin
from web.errors import (
    DATABASE_UNREACHABLE,
    HTTP_ERROR_MESSAGE,
    REDIS_UNREACHABLE,
    RETRY_AFTER_S,
    SERVICE_ERROR_STATUS,
    UNAVAILABLE_MESSAGE,
)

log = logging.getLogger(__name__)

MSG_CSRF = "表单已过期或来源不明（CSRF 校验失败），请刷新页面后重试"
MSG_UNAUTHORIZED = "请先登录管理后台"
MSG_INTERNAL = "服务器内部错误，请稍后重试"
#: The console's words for what the API calls an endpoint (its messages: web/errors.py).
PAGE_MESSAGES = {
    403: "无权访问该页面",
    404: "页面不存在：地址有误，或这个页面已经不存在。请从上方导航进入。",
    405: "这个页面不支持这种操作方式，请从页面上的按钮操作",
}

Page = tuple[str, int, dict[str, str]]
#: The page of each action's form, by the endpoint the form posts to.
FORM_PAGES = {
    "console.requeue_dead": "console.dead_letters",
    "console.delete_dead": "console.dead_letters",
    "console.delete_invalid": "console.invalid_payloads",
    "console.purge_invalid": "console.invalid_payloads",
    "console.retry_delayed": "console.delayed_retries",
    "console.delete_delayed": "console.delayed_retries",
    "console.drill_start": "console.drill_page",
    "console.drill_stop": "console.drill_page",
    "console.regenerate_one": "console.records",
    "console.regenerate_selected": "console.records",
    "console.regenerate_failed": "console.records",
}


def _refused(status: int, message: str) -> Page | WerkzeugResponse:
    """An action's refusal, flashed on its form's page; any other error, its own page."""
    page = FORM_PAGES.get(request.endpoint or "") if request.method == "POST" else None
    if page is None:
        return _page(status, message)
    flash(f"操作未完成：{message}", "error")
    return redirect(url_for(page))


def _page(status: int, message: str) -> Page:
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else {}
    # Raised before any console view ran (an unknown /admin address: web/errors.py hands it
    # here), Flask knows no blueprint, adds none of the console's template context and ran
    # no guard: the signed-in admin is looked up here, for the navigation and the sign-out.
    extra = {}
    if request.blueprint != bp.name:
        if g.get("console_admin") is None:
            try:
                g.console_admin = signed_in_admin()
            except Exception:  # Redis down: the page without the navigation
                log.warning("console error page of %s: the session cannot be read", request.path)
        extra = console_context()
    return render_template("console/error.html", status=status, message=message, **extra), status, headers


@bp.errorhandler(CSRFError)
def csrf_refused(error: CSRFError) -> Page:
    log.warning("console form refused on %s: %s", request.path, error.description)
    return _page(400, MSG_CSRF)


@bp.errorhandler(HTTPException)
def http_error(error: HTTPException) -> Page:
    status = error.code or 500
    custom = error.description if error.description != type(error).description else None
    if status == 503 and custom:
        return _page(status, custom)  # the console's own "not enabled" message
    if status >= 500:
        return _page(status, MSG_INTERNAL)
    default = {401: MSG_UNAUTHORIZED, **PAGE_MESSAGES}.get(status) or HTTP_ERROR_MESSAGE.get(status)
    return _page(status, custom or default or error.name)


@bp.errorhandler(ServiceError)
def service_error(error: ServiceError) -> Page | WerkzeugResponse:
    status = SERVICE_ERROR_STATUS.get(error.code, 500 if error.code >= ServiceError.code else 400)
    if status >= 500:
        log.error("console %s %s failed with %d: %s", request.method, request.path, error.code, error.message)
        return _refused(status, type(error).default_message)
    return _refused(status, error.message)


@bp.errorhandler(Exception)
def unexpected(error: Exception) -> Page | WerkzeugResponse:
    if isinstance(error, DATABASE_UNREACHABLE + REDIS_UNREACHABLE):
        log.error("console %s %s: a server is unreachable: %s", request.method, request.path, error)
        return _refused(503, UNAVAILABLE_MESSAGE)
    log.exception("unhandled error on console %s %s", request.method, request.path, exc_info=error)
    return _page(500, MSG_INTERNAL)
