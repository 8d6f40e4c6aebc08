"""Errors inside the console become a page, not the API's JSON envelope.

The statuses and texts are the API's (web/errors.py); only the form differs. A refused
CSRF token says so in words an admin understands (reload the page and try again).
"""

from __future__ import annotations

import logging

from flask import render_template, request
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException

from services.domain.errors import ServiceError
from web.console.blueprint import bp
from web.console.context import console_context
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

Page = tuple[str, int, dict[str, str]]


def _page(status: int, message: str) -> Page:
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else {}
    # Raised before any console view ran (an unknown /admin address: web/errors.py hands it
    # here), Flask knows no blueprint and adds none of the console's template context.
    extra = console_context() if request.blueprint != bp.name else {}
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
    default = MSG_UNAUTHORIZED if status == 401 else HTTP_ERROR_MESSAGE.get(status, error.name)
    return _page(status, custom or default)


@bp.errorhandler(ServiceError)
def service_error(error: ServiceError) -> Page:
    status = SERVICE_ERROR_STATUS.get(error.code, 500 if error.code >= ServiceError.code else 400)
    if status >= 500:
        log.error("console %s %s failed with %d: %s", request.method, request.path, error.code, error.message)
        return _page(status, type(error).default_message)
    return _page(status, error.message)


@bp.errorhandler(Exception)
def unexpected(error: Exception) -> Page:
    if isinstance(error, DATABASE_UNREACHABLE + REDIS_UNREACHABLE):
        log.error("console %s %s: a server is unreachable: %s", request.method, request.path, error)
        return _page(503, UNAVAILABLE_MESSAGE)
    log.exception("unhandled error on console %s %s", request.method, request.path, exc_info=error)
    return _page(500, MSG_INTERNAL)
