"""The request models (web/request_models.py, web/fields.py) and the body reader
(web/spec.py): every field is read as promised or refused with its message (1001).

The cases are those of the hand-written validator they replace; `v` below gives each old
helper's call its model, validated as web/spec.py validates a request.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from flask import Flask
from pydantic import BaseModel, ValidationError
from werkzeug.datastructures import MultiDict
from werkzeug.exceptions import RequestEntityTooLarge, UnsupportedMediaType

from services.domain.errors import MSG_EMPTY_ID_LIST, ParamError
from web import fields, request_models, spec
from web.fields import Query, QueryBool, QueryTime, error_message, query_values

MAX_ID = 2**63 - 1


def validated(model: type[BaseModel], data: object) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ParamError(error_message(error)) from None


def from_query(model: type[Query], args: MultiDict[str, str]) -> Any:
    names = [f.alias or name for name, f in model.model_fields.items()]
    return validated(model, query_values(args, names))


class FlagQuery(Query):
    f: QueryBool = False


class FlagOnQuery(Query):
    f: QueryBool = True


class TimeQuery(Query):
    t: QueryTime | None = None


class v:  # the old module's name, so the cases read as they did
    """Each helper of the old web/validation.py as the model that now does its work."""

    MAX_CONTENT_LENGTH = fields.MAX_CONTENT_LENGTH
    MAX_BATCH_IDS = fields.MAX_BATCH_IDS
    MAX_ANSWERS = request_models.MAX_ANSWERS
    DEFAULT_PAGE_SIZE = request_models.DEFAULT_PAGE_SIZE
    json_object = staticmethod(spec.read_json_object)

    @staticmethod
    def an_id(value: object, name: str) -> int:
        assert name == "id"
        return int(validated(request_models.IdRequest, {"id": value}).id)

    @staticmethod
    def body_id(body: dict[str, Any], name: str) -> int:
        assert name == "id"
        return int(validated(request_models.IdRequest, body).id)

    @staticmethod
    def body_id_list(body: dict[str, Any], name: str, *, empty_message: str) -> list[int]:
        assert (name, empty_message) == ("ids", MSG_EMPTY_ID_LIST)
        return list(validated(request_models.IdsRequest, body).ids)

    @staticmethod
    def answer_list(body: dict[str, Any]) -> list[tuple[int, int]]:
        request = validated(request_models.SaveAnswersRequest, {"recordId": 1, **body})
        return [(a.question_id, a.value) for a in request.answers]

    @staticmethod
    def query_id(args: MultiDict[str, str], name: str) -> int:
        assert name == "recordId"
        return int(from_query(request_models.RecordIdQuery, args).record_id)

    @staticmethod
    def query_bool(args: MultiDict[str, str], name: str, default: bool = False) -> bool:
        assert name == "f"
        return bool(from_query(FlagOnQuery if default else FlagQuery, args).f)

    @staticmethod
    def query_datetime(args: MultiDict[str, str], name: str) -> datetime | None:
        assert name == "t"
        value: datetime | None = from_query(TimeQuery, args).t
        return value

    @staticmethod
    def page_params(args: MultiDict[str, str]) -> tuple[int, int]:
        query = from_query(request_models.RecordListQuery, args)
        return query.page, query.page_size


@pytest.fixture
def app() -> Flask:
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = v.MAX_CONTENT_LENGTH
    return app


def read_body(app: Flask, data: bytes | str, content_type: str | None = "application/json") -> dict[str, Any]:
    with app.test_request_context("/", method="POST", data=data, content_type=content_type):
        from flask import request

        return v.json_object(request)


def test_json_object_reads_an_object(app: Flask) -> None:
    assert read_body(app, '{"id": 1, "extra": [1, 2]}') == {"id": 1, "extra": [1, 2]}
    assert read_body(app, '{"id": 1}', "application/problem+json") == {"id": 1}
    assert read_body(app, '{"id": 1}', "application/json; charset=utf-8") == {"id": 1}


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_json_object_requires_a_json_content_type(app: Flask, content_type: str | None) -> None:
    with pytest.raises(UnsupportedMediaType):
        read_body(app, '{"id": 1}', content_type)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "合法的 JSON"),
        ("{", "合法的 JSON"),
        ("{'id': 1}", "合法的 JSON"),
        (b"\xff\xfe\x00garbage", "合法的 JSON"),
        ("[" * 30_000 + "]" * 30_000, "合法的 JSON"),  # deeper than the interpreter's stack
        ("[1, 2]", "JSON 对象"),
        ('"text"', "JSON 对象"),
        ("null", "JSON 对象"),
        ("7", "JSON 对象"),
    ],
)
def test_json_object_rejects_malformed_bodies(app: Flask, body: str | bytes, message: str) -> None:
    with pytest.raises(ParamError, match=message):
        read_body(app, body)


def test_json_object_caps_the_body_size(app: Flask) -> None:
    big = json.dumps({"pad": "x" * v.MAX_CONTENT_LENGTH})
    with pytest.raises(RequestEntityTooLarge):
        read_body(app, big)


@pytest.mark.parametrize("value", [1, 2, MAX_ID])
def test_an_id_accepts_bigint_range(value: int) -> None:
    assert v.an_id(value, "id") == value


@pytest.mark.parametrize(
    "value", [0, -1, MAX_ID + 1, 2**64, True, False, 1.0, 1.5, "1", None, [1], {"id": 1}]
)
def test_an_id_rejects_everything_else(value: object) -> None:
    with pytest.raises(ParamError, match="id"):
        v.an_id(value, "id")


def test_body_id_requires_the_field() -> None:
    assert v.body_id({"id": 3, "unknown": "ignored"}, "id") == 3
    with pytest.raises(ParamError, match="缺少参数 id"):
        v.body_id({}, "id")
    with pytest.raises(ParamError, match="缺少参数 id"):
        v.body_id({"id": None}, "id")


def test_body_id_list_accepts_distinct_ids_in_order() -> None:
    assert v.body_id_list({"ids": [3, 1, 2]}, "ids", empty_message=MSG_EMPTY_ID_LIST) == [3, 1, 2]
    ids = list(range(1, v.MAX_BATCH_IDS + 1))
    assert v.body_id_list({"ids": ids}, "ids", empty_message=MSG_EMPTY_ID_LIST) == ids


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, MSG_EMPTY_ID_LIST),
        ({"ids": None}, MSG_EMPTY_ID_LIST),
        ({"ids": []}, MSG_EMPTY_ID_LIST),
        ({"ids": 1}, "整数数组"),
        ({"ids": "1,2"}, "整数数组"),
        ({"ids": {"0": 1}}, "整数数组"),
        ({"ids": [1, 1]}, "重复"),
        ({"ids": [1, 0]}, r"ids\[1\]"),
        ({"ids": [1, True]}, r"ids\[1\]"),
        ({"ids": [1, "2"]}, r"ids\[1\]"),
        ({"ids": [1, 2.0]}, r"ids\[1\]"),
        ({"ids": [MAX_ID + 1]}, r"ids\[0\]"),
        ({"ids": list(range(1, v.MAX_BATCH_IDS + 2))}, "最多"),
    ],
)
def test_body_id_list_rejects(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ParamError, match=message):
        v.body_id_list(body, "ids", empty_message=MSG_EMPTY_ID_LIST)


def test_answer_list_reads_pairs() -> None:
    body = {"answers": [{"questionId": 1, "value": 5, "note": "ignored"}, {"questionId": 2, "value": 1}]}
    assert v.answer_list(body) == [(1, 5), (2, 1)]


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        (None, "缺少参数 answers"),
        ([], "不能为空"),
        ({"1": 3}, "必须是数组"),
        ([3], r"answers\[0\] 必须是对象"),
        ([{"value": 3}], r"answers\[0\]\.questionId"),
        ([{"questionId": 1}], r"answers\[0\]\.value"),
        ([{"questionId": 1, "value": 0}], r"answers\[0\]\.value"),
        ([{"questionId": 1, "value": 6}], r"answers\[0\]\.value"),
        ([{"questionId": 1, "value": True}], r"answers\[0\]\.value"),
        ([{"questionId": 1, "value": 3.0}], r"answers\[0\]\.value"),
        ([{"questionId": 2**31, "value": 3}], r"answers\[0\]\.questionId"),
        ([{"questionId": -1, "value": 3}], r"answers\[0\]\.questionId"),
        ([{"questionId": 1, "value": 3}, {"questionId": 1, "value": 4}], "只能作答一次"),
        ([{"questionId": i, "value": 3} for i in range(1, v.MAX_ANSWERS + 2)], "最多"),
    ],
)
def test_answer_list_rejects(answers: object, message: str) -> None:
    with pytest.raises(ParamError, match=message):
        v.answer_list({"answers": answers})


def args(**values: str | list[str]) -> MultiDict[str, str]:
    return MultiDict(values)


def test_query_id() -> None:
    assert v.query_id(args(recordId="42"), "recordId") == 42
    assert v.query_id(args(recordId=str(MAX_ID)), "recordId") == MAX_ID


@pytest.mark.parametrize(
    "raw",
    [None, "", "0", "-3", str(MAX_ID + 1), "1.0", "1e3", " 7", "1_000", "٣", "0x10", "9" * 5000, ["1", "2"]],
)
def test_query_id_rejects(raw: str | list[str] | None) -> None:
    query = args() if raw is None else args(recordId=raw)
    with pytest.raises(ParamError, match="recordId"):
        v.query_id(query, "recordId")


def test_query_bool() -> None:
    assert v.query_bool(args(), "f") is False
    assert v.query_bool(args(), "f", default=True) is True
    for raw in ("true", "TRUE", "1"):
        assert v.query_bool(args(f=raw), "f") is True
    for raw in ("false", "False", "0"):
        assert v.query_bool(args(f=raw), "f") is False
    for raw in ("yes", "2", "on"):
        with pytest.raises(ParamError, match="f"):
            v.query_bool(args(f=raw), "f")


def test_query_datetime_is_utc() -> None:
    assert v.query_datetime(args(), "t") is None
    assert v.query_datetime(args(t="2025-01-15"), "t") == datetime(2025, 1, 15, tzinfo=UTC)
    assert v.query_datetime(args(t="2025-01-15T10:30:00"), "t") == datetime(2025, 1, 15, 10, 30, tzinfo=UTC)
    assert v.query_datetime(args(t="2025-01-15T10:30:00+08:00"), "t") == datetime(
        2025, 1, 15, 2, 30, tzinfo=UTC
    )
    # .NET writes seven fraction digits.
    assert v.query_datetime(args(t="2025-01-15T10:30:00.1234567Z"), "t") == datetime(
        2025, 1, 15, 10, 30, 0, 123456, tzinfo=UTC
    )


@pytest.mark.parametrize(
    "raw",
    ["yesterday", "2025-13-01", "2025-01-15T25:00", "0001-01-01T00:00:00+08:00", "9999-12-31T23:59:59-08:00"],
)
def test_query_datetime_rejects(raw: str) -> None:
    with pytest.raises(ParamError, match="ISO-8601"):
        v.query_datetime(args(t=raw), "t")


def test_page_params() -> None:
    assert v.page_params(args()) == (1, v.DEFAULT_PAGE_SIZE)
    assert v.page_params(args(page="3", pageSize="100")) == (3, 100)
    for bad in ({"page": "0"}, {"pageSize": "0"}, {"pageSize": "101"}, {"page": str(2**31)}, {"page": "x"}):
        with pytest.raises(ParamError):
            v.page_params(args(**bad))
