"""web/errors.py, web/envelope.py: every outcome is the JSON envelope."""

from __future__ import annotations

import io
import logging

import pytest
import redis
from flask import Flask, abort
from sqlalchemy import exc as sa_exc

from services.domain.errors import (
    AutosaveUnavailable,
    DatabaseUnavailable,
    InvalidOperation,
    ParamError,
    QueueUnavailable,
    RecordNotFound,
    ServiceError,
)
from tests.support.web_unit import UNIT_SETTINGS, make_app, user_auth
from web import create_app
from web.errors import RETRY_AFTER_S, UNAVAILABLE_CODE, UNAVAILABLE_MESSAGE
from web.fields import MAX_CONTENT_LENGTH


@pytest.fixture
def app() -> Flask:
    app = create_app(UNIT_SETTINGS)

    # Routes that fail on purpose, added before the first request.
    @app.get("/boom")
    def boom() -> str:
        raise RuntimeError("password=hunter2 at db.internal:5432")

    @app.get("/abort500")
    def abort500() -> str:
        abort(500)

    @app.get("/raise/<int:code>")
    def raise_service_error(code: int) -> str:
        errors: dict[int, ServiceError] = {
            1001: ParamError("参数 x 错误"),
            2005: InvalidOperation("当前状态不允许重新生成"),
            3241: RecordNotFound(),
            5003: QueueUnavailable("could not enqueue: Error 111 connecting to 10.0.0.7:6379"),
            5000: ServiceError("报告数据缺失 on host db.internal"),
        }
        raise errors[code]

    #: What a view may meet when a server is unreachable, by name.
    unreachable: dict[str, Exception] = {
        "database-unavailable": DatabaseUnavailable("database unreachable: db.internal:5432 refused"),
        "operational": sa_exc.OperationalError("SELECT 1", {}, Exception("server closed the connection")),
        "interface": sa_exc.InterfaceError("SELECT 1", {}, Exception("connection already closed")),
        "pool-timeout": sa_exc.TimeoutError("QueuePool limit of size 5 overflow 5 reached"),
        "redis-timeout": redis.TimeoutError("Timeout reading from 10.0.0.7:6379"),
        "redis-connection": redis.ConnectionError("Error 111 connecting to 10.0.0.7:6379"),
    }

    @app.get("/unreachable/<name>")
    def raise_unreachable(name: str) -> str:
        raise unreachable[name]

    return app


@pytest.mark.parametrize(
    ("code", "status", "message"),
    [
        (1001, 400, "参数 x 错误"),
        (2005, 409, "当前状态不允许重新生成"),
        (3241, 404, "测评记录不存在"),
        (5003, 503, QueueUnavailable.default_message),
        (5000, 500, ServiceError.default_message),
    ],
)
def test_service_errors_map_by_code(app: Flask, code: int, status: int, message: str) -> None:
    response = app.test_client().get(f"/raise/{code}")
    assert response.status_code == status
    assert response.json == {"code": code, "message": message, "data": None}


@pytest.mark.parametrize(
    "name",
    ["database-unavailable", "operational", "interface", "pool-timeout", "redis-timeout", "redis-connection"],
)
def test_an_unreachable_server_is_503_with_retry_after(app: Flask, name: str) -> None:
    response = app.test_client().get(f"/unreachable/{name}")
    assert response.status_code == 503
    assert response.headers["Retry-After"] == str(RETRY_AFTER_S)
    assert response.json == {"code": UNAVAILABLE_CODE, "message": UNAVAILABLE_MESSAGE, "data": None}
    assert "10.0.0.7" not in response.get_data(as_text=True)
    assert "db.internal" not in response.get_data(as_text=True)


@pytest.mark.parametrize("error", [QueueUnavailable(), AutosaveUnavailable()])
def test_every_503_service_error_says_when_to_retry(error: ServiceError) -> None:
    app = create_app(UNIT_SETTINGS)

    @app.get("/down")
    def down() -> str:
        raise error

    response = app.test_client().get("/down")
    assert response.status_code == 503
    assert response.headers["Retry-After"] == str(RETRY_AFTER_S)
    assert response.json == {"code": 5003, "message": type(error).default_message, "data": None}


def test_unexpected_exception_is_500_generic_and_logged(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        response = app.test_client().get("/boom")
    assert response.status_code == 500
    assert response.json == {"code": 5000, "message": ServiceError.default_message, "data": None}
    assert "hunter2" not in response.get_data(as_text=True)
    logged = [r for r in caplog.records if r.exc_info and "hunter2" in str(r.exc_info[1])]
    assert logged, "the traceback must be logged"


def test_http_500_is_generic(app: Flask) -> None:
    response = app.test_client().get("/abort500")
    assert response.status_code == 500
    assert response.json is not None
    assert response.json["code"] == 5000


def test_unknown_path_is_404(app: Flask) -> None:
    for path in ("/nope", "/api/assessment/nope", "/api/admin/nope", "/api/assessment/records/"):
        response = app.test_client().get(path)
        assert response.status_code == 404
        assert response.json == {"code": 404, "message": "接口不存在", "data": None}


def test_wrong_method_is_405_with_allow(app: Flask) -> None:
    response = app.test_client().get("/api/assessment/submitAnswers", headers=user_auth())
    assert response.status_code == 405
    assert response.json is not None
    assert response.json["code"] == 405
    assert "POST" in response.headers["Allow"]


def test_non_json_body_is_415(app: Flask) -> None:
    response = app.test_client().post(
        "/api/assessment/startAssessment", data="recordId=1", content_type="text/plain", headers=user_auth()
    )
    assert response.status_code == 415
    assert response.json is not None
    assert response.json["code"] == 415


def test_oversized_body_is_413(app: Flask) -> None:
    body = '{"recordId": 1, "pad": "' + "x" * MAX_CONTENT_LENGTH + '"}'
    response = app.test_client().post(
        "/api/assessment/startAssessment", data=body, content_type="application/json", headers=user_auth()
    )
    assert response.status_code == 413
    assert response.json is not None
    assert response.json["code"] == 413
    assert "64 KiB" in response.json["message"]


@pytest.mark.parametrize("extra", [1, 10_000])
def test_a_chunked_body_over_the_cap_is_413_not_truncated(app: Flask, extra: int) -> None:
    # No Content-Length: the server (gunicorn) ends the stream and says so.
    body = b'{"recordId": 1, "pad": "' + b"x" * (MAX_CONTENT_LENGTH + extra) + b'"}'
    response = app.test_client().post(
        "/api/assessment/startAssessment",
        input_stream=io.BytesIO(body),
        content_type="application/json",
        headers={**user_auth(), "Transfer-Encoding": "chunked"},
        environ_overrides={"wsgi.input_terminated": True},
    )
    assert response.status_code == 413
    assert response.json is not None
    assert response.json["code"] == 413


def test_a_chunked_body_within_the_cap_is_read_whole(app: Flask) -> None:
    body = b'{"recordId": 0, "pad": "' + b"x" * 1000 + b'"}'
    response = app.test_client().post(
        "/api/assessment/startAssessment",
        input_stream=io.BytesIO(body),
        content_type="application/json",
        headers={**user_auth(), "Transfer-Encoding": "chunked"},
        environ_overrides={"wsgi.input_terminated": True},
    )
    # Parsed whole: the id is checked (0 is out of range), before any database access.
    assert response.status_code == 400
    assert response.json is not None
    assert "recordId" in response.json["message"]


def test_malformed_json_is_400_1001(app: Flask) -> None:
    response = app.test_client().post(
        "/api/assessment/startAssessment",
        data="{recordId: 1",
        content_type="application/json",
        headers=user_auth(),
    )
    assert response.status_code == 400
    assert response.json == {"code": 1001, "message": "请求体不是合法的 JSON", "data": None}


def test_success_envelope_keeps_chinese_readable() -> None:
    app = make_app()
    with app.test_request_context():
        from web.envelope import ok

        response = ok({"statusText": "生成失败"})
    assert response.status_code == 200
    assert "生成失败".encode() in response.get_data()
    assert response.json == {"code": 0, "message": "success", "data": {"statusText": "生成失败"}}


def test_healthz_does_no_io() -> None:
    response = make_app().test_client().get("/healthz")  # both servers are unreachable here
    assert response.status_code == 200
    assert response.json == {"code": 0, "message": "success", "data": {"status": "ok"}}


def test_readyz_names_what_is_down() -> None:
    response = make_app().test_client().get("/readyz")
    assert response.status_code == 503
    assert response.json is not None
    assert response.json["code"] == 5003
    assert response.json["data"] == {"database": "unavailable", "redis": "unavailable"}
    assert "database" in response.json["message"]
    assert "redis" in response.json["message"]
