"""The one place where errors become responses.

Every failure leaves the app as the JSON envelope with a non-zero code:

* a `ServiceError` keeps its domain code (the .NET API's 1001, 2005, 3241; 5003 queue
  unavailable) and gets the HTTP status of `SERVICE_ERROR_STATUS`;
* an HTTP error raised by Werkzeug/Flask or by web/auth.py (no domain code) uses its
  HTTP status as the code, except 400 which is a `ParamError` (1001) like any other
  bad input;
* a dependency the call needs is unreachable (`DatabaseUnavailable`, SQLAlchemy's
  OperationalError / InterfaceError / pool timeout in the middle of a request, a Redis
  connection error or timeout that reached the view): 503 / 5003 with `Retry-After`,
  like every other 503 (the queue, the autosave store);
* anything else is a bug: logged with its traceback, answered 500 / 5000 with a
  generic message so no internals reach the client.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from flask import Flask, Response, current_app, request
from flask.typing import ResponseReturnValue
from sqlalchemy import exc as sa_exc
from werkzeug.exceptions import HTTPException

from redis_adapters.redis_clients import UNREACHABLE
from services.domain.errors import (
    DatabaseUnavailable,
    InvalidOperation,
    ParamError,
    QueueUnavailable,
    RecordNotFound,
    ServiceError,
)
from web.envelope import envelope
from web.fields import MAX_CONTENT_LENGTH

log = logging.getLogger(__name__)

#: HTTP status of each domain error code; unknown codes fall back on `_fallback_status`.
SERVICE_ERROR_STATUS: dict[int, int] = {
    ParamError.code: 400,
    InvalidOperation.code: 409,
    RecordNotFound.code: 404,
    QueueUnavailable.code: 503,
}

#: Envelope code of an unexpected failure (the ServiceError base code).
INTERNAL_ERROR_CODE = ServiceError.code
INTERNAL_ERROR_MESSAGE = ServiceError.default_message

#: Envelope code and message when a server the call needs is unreachable: the code of
#: the queue's and the autosave store's 503s (a dependency is down), a generic message.
UNAVAILABLE_CODE = QueueUnavailable.code
UNAVAILABLE_MESSAGE = "服务暂时不可用，请稍后重试"
#: Retry-After of every 503, in seconds: longer than the Redis guard's fail-fast window
#: (web/redis_guard.py) and than a database failover's first seconds, short enough for a
#: user who waits on the answer.
RETRY_AFTER_S = 5

#: Failures that mean "the database cannot be reached", not "this code is wrong":
#: OperationalError / InterfaceError (connection lost, server shutting down, also
#: serialization failures and statement timeouts, all worth a retry) and the pool's
#: timeout (every connection busy).
DATABASE_UNREACHABLE: tuple[type[Exception], ...] = (
    DatabaseUnavailable,
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.TimeoutError,
)
#: Redis failures that reached a view (most callers turn them into a ServiceError).
REDIS_UNREACHABLE: tuple[type[Exception], ...] = UNREACHABLE

#: Client-facing messages of the HTTP errors, used unless the raiser gave its own.
HTTP_ERROR_MESSAGE: dict[int, str] = {
    400: "请求格式错误",
    401: "未提供有效的身份凭证",
    403: "无权访问该接口",
    404: "接口不存在",
    405: "不支持该请求方法",
    413: f"请求体过大（上限 {MAX_CONTENT_LENGTH // 1024} KiB）",
    414: "请求行过长",
    415: "请求体必须是 JSON（Content-Type: application/json）",
    431: "请求头过大",
}


def _fallback_status(code: int) -> int:
    return 500 if code >= INTERNAL_ERROR_CODE else 400


def handle_service_error(error: ServiceError) -> Response:
    status = SERVICE_ERROR_STATUS.get(error.code, _fallback_status(error.code))
    message = error.message
    if status >= 500:
        # Server-side messages may name hosts and ports: log them, tell the client the
        # class's generic text.
        log.error("%s %s failed with %d: %s", request.method, request.path, error.code, error.message)
        message = type(error).default_message
    return envelope(error.code, message, status=status, headers=_retry_after(status))


def _retry_after(status: int) -> dict[str, str]:
    return {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else {}


def handle_unreachable(error: Exception) -> Response:
    # No traceback: an outage is not a bug, and one line per failed request is enough.
    log.error(
        "%s %s failed, a server is unreachable: %s: %s",
        request.method,
        request.path,
        type(error).__name__,
        error,
    )
    return envelope(UNAVAILABLE_CODE, UNAVAILABLE_MESSAGE, status=503, headers=_retry_after(503))


#: `app.extensions` key of the pages' own error handlers, by path prefix (register_error_handlers).
PAGE_ERRORS = "mi_page_errors"


def _page_handler() -> Callable[[HTTPException], ResponseReturnValue] | None:
    """The error handler of the page area `request.path` is in, for an error raised before any
    view of that area ran (no URL rule matched, or not with this method): Flask then knows
    no blueprint, so without this a user's mistyped report link would answer JSON."""
    pages: Mapping[str, Callable[[HTTPException], ResponseReturnValue]] = current_app.extensions.get(
        PAGE_ERRORS, {}
    )
    path = request.path
    for prefix, handler in pages.items():
        if path == prefix or path.startswith(prefix + "/"):
            return handler
    return None


def handle_http_error(error: HTTPException) -> ResponseReturnValue:
    if request.url_rule is None or request.blueprint is None:
        page = _page_handler()
        if page is not None:
            return page(error)
    status = error.code or 500
    if status >= 500:
        log.error("%s %s answered HTTP %d: %s", request.method, request.path, status, error)
        return envelope(
            INTERNAL_ERROR_CODE, INTERNAL_ERROR_MESSAGE, status=status, headers=_retry_after(status)
        )
    code = ParamError.code if status == 400 else status
    # A description passed by the raiser is meant for the client; Werkzeug's class
    # defaults are English boilerplate, replaced by our table.
    custom = error.description if error.description != type(error).description else None
    message = custom or HTTP_ERROR_MESSAGE.get(status) or error.name
    headers: dict[str, str] = {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if status == 405 and error.response is None:
        allow = dict(error.get_headers()).get("Allow")
        if allow:
            headers["Allow"] = allow
    return envelope(code, message, status=status, headers=headers)


def handle_unexpected(error: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.path, exc_info=error)
    return envelope(INTERNAL_ERROR_CODE, INTERNAL_ERROR_MESSAGE, status=500)


def register_error_handlers(
    app: Flask, pages: Mapping[str, Callable[[HTTPException], ResponseReturnValue]] | None = None
) -> None:
    """The envelope for every error; `pages`: path prefix -> the HTML error handler of the
    pages served there, for HTTP errors raised before one of their views ran."""
    app.extensions[PAGE_ERRORS] = dict(pages or {})
    app.register_error_handler(ServiceError, handle_service_error)
    app.register_error_handler(HTTPException, handle_http_error)
    for unreachable in DATABASE_UNREACHABLE + REDIS_UNREACHABLE:
        app.register_error_handler(unreachable, handle_unreachable)
    app.register_error_handler(Exception, handle_unexpected)
