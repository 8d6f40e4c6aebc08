"""The report as an HTML page: ``GET /reports/<record>``, readable on a phone, printable on A4.

Reached with a signed link (``?s=...``, what `GET /api/assessment/report` returns as
`pageUrl`, valid `LINK_MAX_AGE_S`) or with the owner's user token
(``Authorization: Bearer``). Either way only the record's owner gets it: a link names
its user and record, so it cannot be turned into another one's. The radar chart is SVG
drawn here (web/radar.py); times are shown in DISPLAY_TIMEZONE.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flask import Blueprint, Response, render_template, request, url_for
from itsdangerous import BadData, URLSafeTimedSerializer
from markupsafe import Markup
from werkzeug.exceptions import HTTPException, NotFound, Unauthorized

from services.domain.errors import InvalidOperation, ServiceError
from services.domain.limits import MAX_ID, is_strict_int
from services.domain.questionnaire import load_questionnaire
from services.domain.status import status_text
from services.domain.views import DimensionScoreView, ReportView
from services.usecases import assessment
from web import deps
from web.auth import MSG_INVALID_USER, bearer_token, is_admin_token, verify_user_token
from web.errors import DATABASE_UNREACHABLE, REDIS_UNREACHABLE, SERVICE_ERROR_STATUS, UNAVAILABLE_MESSAGE
from web.radar import radar_svg
from web.spec import REPORT, media_operation

bp = Blueprint("report_page", __name__, template_folder="templates")
log = logging.getLogger(__name__)

LINK_SALT = "report-page"
#: A report link works this long after it was handed out (a week: long enough to share
#: with a parent or print later, short enough that a forwarded link stops working).
LINK_MAX_AGE_S = 7 * 24 * 3600
#: Scores are 0..100 (services/domain/scoring.py).
MAX_SCORE = 100.0

MSG_LINK_INVALID = "报告链接无效或已过期，请在小程序中重新打开报告"
#: Headings of the page a reader gets instead of the report (it is a page, never JSON:
#: every shared link ends up expired after LINK_MAX_AGE_S).
HEADING = {401: "链接已失效", 404: "找不到这份报告", 503: "暂时无法打开"}
HINT = {401: "报告链接的有效期为 7 天。请回到小程序的测评记录，重新打开报告即可得到新的链接。"}

#: The page is personal: never cached by anyone else, never leaking the signed link.
PAGE_HEADERS = {
    "Cache-Control": "private, no-store",
    "Referrer-Policy": "no-referrer",
    # Inline styles only (the page's own); nothing loaded, nothing framing it.
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
}


def _serializer(secret_key: str) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(secret_key, salt=LINK_SALT)


def sign_report_link(secret_key: str, user_id: int, record_id: int) -> str:
    """The `s` parameter of a link to the report of `record_id`, for its owner `user_id`."""
    return _serializer(secret_key).dumps({"uid": user_id, "rid": record_id})


def verify_report_link(secret_key: str, signed: str, record_id: int) -> int | None:
    """The owner's user id if `signed` is a valid, unexpired link to `record_id`, else None."""
    if not secret_key:
        return None
    try:
        payload: Any = _serializer(secret_key).loads(signed, max_age=LINK_MAX_AGE_S)
    except BadData:
        return None
    if not isinstance(payload, dict):
        return None
    # Strict: 60.0 or True equal 60 or 1 in Python, but no link ever carried them.
    linked: object = payload.get("rid")
    if not is_strict_int(linked) or linked != record_id:
        return None
    user_id: object = payload.get("uid")
    if not is_strict_int(user_id) or not 1 <= user_id <= MAX_ID:
        return None
    return user_id


def report_page_url(user_id: int, record_id: int) -> str:
    """A signed, host-relative link to the page (relative: no trust in the Host header)."""
    secret = deps.current().settings.secret_key
    return url_for(
        "report_page.report_page", record_id=record_id, s=sign_report_link(secret, user_id, record_id)
    )


def _viewer(record_id: int) -> int:
    """Who may see the page: the signed link's user, else the bearer user token's; else 401."""
    settings = deps.current().settings
    signed = request.args.get("s")
    if signed:
        user_id = verify_report_link(settings.secret_key, signed, record_id)
        if user_id is None:
            raise Unauthorized(MSG_LINK_INVALID)
        return user_id
    token = bearer_token()
    if token is None or is_admin_token(settings.admin_tokens, token):
        raise Unauthorized(MSG_LINK_INVALID)
    user_id = verify_user_token(settings.secret_key, token)
    if user_id is None:
        raise Unauthorized(MSG_INVALID_USER)
    return user_id


def display_time(moment: datetime | None) -> str:
    """`2026-12-01 08:09 (UTC+08:00)` in DISPLAY_TIMEZONE; empty for no time."""
    if moment is None:
        return ""
    local = moment.astimezone(deps.current().settings.display_zone)
    offset = local.strftime("%z")
    return f"{local:%Y-%m-%d %H:%M} (UTC{offset[:3]}:{offset[3:]})"


def chart(report: ReportView) -> Markup:
    return dimensions_chart(report.dimensions)


def dimensions_chart(dimensions: Sequence[DimensionScoreView]) -> Markup:
    """The radar chart of a report's dimensions, its axes in the questionnaire's order of
    dimensions (a fixed shape to compare reports by, not the ranking). The admin console's
    record page draws the same chart."""
    order = {d.code: d.sort_order for d in load_questionnaire().dimensions}
    ordered = sorted(dimensions, key=lambda d: (order.get(d.code, len(order) + 1), d.rank))
    return radar_svg([d.name for d in ordered], [d.score for d in ordered], MAX_SCORE, title="多元智能雷达图")


@bp.get("/reports/<int:record_id>")
@media_operation(
    {
        200: ("the report page", ("text/html",)),
        401: ("no valid link nor the owner's user token", ("text/html",)),
        404: ("no such record of the link's user (or the token's)", ("text/html",)),
        409: ("no report: generating (3), failed (5) or not submitted", ("text/html",)),
        503: ("a server the page needs is unreachable", ("text/html",)),
    },
    tag=REPORT,
    parameters={"record_id": "the record"},
    query={"s": "the signed link's parameter; without it, the user token is required"},
)
def report_page(record_id: int) -> Response:
    """The report as an HTML page (radar chart, levels, interpretations, suggestions)

    For the record's owner: with the signed link of the report's pageUrl (`s`), or with the
    user token. Readable on a phone, printable on A4; times in DISPLAY_TIMEZONE. Every answer
    is a page, a refusal too.
    """
    if not 1 <= record_id <= MAX_ID:
        raise NotFound()
    user_id = _viewer(record_id)
    try:
        report = assessment.get_report(deps.new_uow(), user_id, record_id)
    except InvalidOperation as exc:
        record = assessment.get_record(deps.new_uow(), user_id, record_id)
        body = render_template(
            "report/unavailable.html",
            record=record,
            status_text=status_text(record.status),
            message=exc.message,
        )
        return Response(body, status=409, headers=PAGE_HEADERS, mimetype="text/html")
    body = render_template(
        "report/page.html",
        report=report,
        chart=chart(report),
        completed=display_time(report.completed_at),
        time_zone=deps.current().settings.display_timezone,
    )
    return Response(body, headers=PAGE_HEADERS, mimetype="text/html")


def problem_page(status: int, message: str) -> Response:
    body = render_template(
        "report/problem.html",
        status=status,
        heading=HEADING.get(status, "无法显示报告"),
        message=message,
        hint=HINT.get(status),
    )
    headers = dict(PAGE_HEADERS)
    if status == 503:
        headers["Retry-After"] = "5"
    return Response(body, status=status, headers=headers, mimetype="text/html")


@bp.errorhandler(HTTPException)
def http_problem(error: HTTPException) -> Response:
    status = error.code or 500
    default = type(error).description
    message = error.description if error.description and error.description != default else MSG_LINK_INVALID
    if status == 404:
        message = "没有这份报告，或它不属于这个链接的用户。"
    elif status == 405:
        message = "报告只能在浏览器中打开，请从小程序的测评记录重新打开报告。"
    return problem_page(status, message if status < 500 else UNAVAILABLE_MESSAGE)


@bp.errorhandler(ServiceError)
def service_problem(error: ServiceError) -> Response:
    status = SERVICE_ERROR_STATUS.get(error.code, 400)
    return problem_page(status, error.message if status < 500 else UNAVAILABLE_MESSAGE)


@bp.errorhandler(Exception)
def unexpected_problem(error: Exception) -> Response:
    if isinstance(error, DATABASE_UNREACHABLE + REDIS_UNREACHABLE):
        log.error("report page %s: a server is unreachable: %s", request.path, error)
        return problem_page(503, UNAVAILABLE_MESSAGE)
    log.exception("unhandled error on the report page %s", request.path, exc_info=error)
    return problem_page(500, "服务器内部错误，请稍后重试")
