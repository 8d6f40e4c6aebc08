"""web/response_models.py, web/fields.py: a service view becomes the API's JSON (camelCase,
in the view's order, times with their offset), and a result its model refuses is a 500."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from flask import Blueprint, Flask
from pydantic import TypeAdapter

from services.domain.errors import ServiceError
from services.domain.views import AdminRecordRow, BatchRegenerateResult, Page
from tests.support.web_unit import UNIT_SETTINGS
from web import create_app
from web.fields import Time
from web.response_models import AdminRecordPage, Ok
from web.response_models import BatchRegenerateResult as BatchModel
from web.spec import ASSESSMENT, Reply, operation, success

TIME = TypeAdapter(Time)


def test_a_view_is_written_camel_cased_in_its_order() -> None:
    body = Ok[BatchModel].model_validate({"data": BatchRegenerateResult(1, 2)}).model_dump(mode="json")
    assert body == {
        "code": 0,
        "message": "success",
        "data": {"successCount": 1, "skippedCount": 2, "items": []},
    }
    assert list(body["data"]) == ["successCount", "skippedCount", "items"]
    moment = datetime(2025, 1, 15, 10, 30, tzinfo=timezone(timedelta(hours=8)))
    page = Page(
        items=[AdminRecordRow(3, 7, 5, "生成失败", moment, None, None, False)], total=1, page=1, page_size=20
    )
    assert (
        AdminRecordPage.model_validate(page).model_dump_json().encode()
        == (
            '{"items":[{"id":3,"userId":7,"status":5,"statusName":"生成失败","createdAt":"2025-01-15T10:30:00+08:00",'
            '"submittedAt":null,"completedAt":null,"isDeleted":false}],"total":1,"page":1,"pageSize":20}'
        ).encode()
    )


@pytest.mark.parametrize(
    ("moment", "written"),
    [
        (datetime(2025, 1, 1, tzinfo=UTC), "2025-01-01T00:00:00+00:00"),
        # Every time carries an offset: a naive one is UTC, an aware one keeps its own.
        (datetime(2025, 1, 1, 8, 30), "2025-01-01T08:30:00+00:00"),
        (datetime(2025, 1, 1, 8, 30, tzinfo=ZoneInfo("Asia/Shanghai")), "2025-01-01T08:30:00+08:00"),
        (datetime(2025, 1, 1, 8, 30, 0, 123456, tzinfo=UTC), "2025-01-01T08:30:00.123456+00:00"),
    ],
)
def test_times_are_iso_8601_with_their_offset(moment: datetime, written: str) -> None:
    assert TIME.dump_python(moment, mode="json") == written


@pytest.fixture
def app() -> Flask:
    app = create_app(UNIT_SETTINGS)
    bp = Blueprint("broken", __name__)

    @bp.get("/broken")
    @operation(BatchModel, tag=ASSESSMENT)
    def broken() -> Reply:
        """A view whose result lacks a field of its model"""
        return success({"successCount": 1})

    @bp.get("/fine")
    @operation(BatchModel, tag=ASSESSMENT)
    def fine() -> Reply:
        """A view whose result is its model's"""
        return success(BatchRegenerateResult(2, 0))

    app.register_blueprint(bp)
    return app


def test_the_success_is_written_by_its_model(app: Flask) -> None:
    response = app.test_client().get("/fine")
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert (
        response.get_data()
        == b'{"code":0,"message":"success","data":{"successCount":2,"skippedCount":0,"items":[]}}\n'
    )


def test_a_result_its_model_refuses_is_the_generic_500(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        response = app.test_client().get("/broken")
    assert response.status_code == 500
    assert response.json == {"code": 5000, "message": ServiceError.default_message, "data": None}
    assert any(r.exc_info for r in caplog.records), "the validation error must be logged with its traceback"
