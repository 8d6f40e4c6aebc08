"""Bad input on every endpoint: a clear 4xx with a code, and nothing changed.

One table, keyed by the endpoint (rule path and method) it exercises; a test checks the
table covers the whole URL map, so a new endpoint cannot ship without its bad cases.
Each case runs against a database holding records of every status and a non-empty
queue, and must leave both exactly as they were.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from redis_adapters.queues import REPORT_QUEUE_KEY
from services.domain.errors import MSG_EMPTY_ID_LIST
from tests.support.envelope import json_body
from tests.support.records import RecordSpec
from tests.support.web_app import ADMIN_PATH, USER_PATH, Records
from web.fields import MAX_BATCH_IDS, MAX_CONTENT_LENGTH

Headers = Callable[[int], dict[str, str]]
BIG = 2**63  # one past the largest bigint
OWNER = 1001
IMPLICIT_METHODS = {"HEAD", "OPTIONS"}


@dataclass(frozen=True)
class Bad:
    """A request to `endpoint` (method, rule path) and the refusal expected."""

    endpoint: tuple[str, str]
    name: str
    status: int
    code: int
    method: str | None = None  # another method than the endpoint's (405 cases)
    body: Any = None  # sent as JSON unless `raw` is given
    raw: str | bytes | None = None
    content_type: str | None = "application/json"
    query: list[tuple[str, str]] = field(default_factory=list)
    message: str | None = None
    url: str | None = None  # the path requested, for a rule with a variable part
    #: The refusal is an HTML page (the report page's: a reader follows a link, and gets a
    #: page, never JSON); `code` is then not checked.
    page: bool = False


def post(path: str) -> tuple[str, str]:
    return ("POST", path)


def get(path: str) -> tuple[str, str]:
    return ("GET", path)


def body_cases(endpoint: tuple[str, str], id_field: str, extra: dict[str, Any] | None = None) -> list[Bad]:
    """The refusals shared by every endpoint that reads one id from a JSON body."""
    extra = extra or {}

    def with_id(value: Any) -> dict[str, Any]:
        return {id_field: value, **extra}

    cases = [
        Bad(endpoint, "no content type", 415, 415, raw=json.dumps(with_id(1)), content_type=None),
        Bad(endpoint, "text/plain", 415, 415, raw=json.dumps(with_id(1)), content_type="text/plain"),
        Bad(
            endpoint, "form", 415, 415, raw=f"{id_field}=1", content_type="application/x-www-form-urlencoded"
        ),
        Bad(
            endpoint, "malformed JSON", 400, 1001, raw="{" + id_field + ": 1", message="请求体不是合法的 JSON"
        ),
        Bad(endpoint, "empty body", 400, 1001, raw=""),
        Bad(endpoint, "invalid UTF-8", 400, 1001, raw=b'{"x": "\xff"}'),
        Bad(endpoint, "deep nesting", 400, 1001, raw="[" * 20_000 + "]" * 20_000),
        Bad(endpoint, "array body", 400, 1001, body=[with_id(1)]),
        Bad(endpoint, "missing id", 400, 1001, body=extra, message=f"缺少参数 {id_field}"),
        Bad(endpoint, "null id", 400, 1001, body=with_id(None)),
        Bad(endpoint, "string id", 400, 1001, body=with_id("1")),
        Bad(endpoint, "bool id", 400, 1001, body=with_id(True)),
        Bad(endpoint, "float id", 400, 1001, body=with_id(1.0)),
        Bad(endpoint, "zero id", 400, 1001, body=with_id(0)),
        Bad(endpoint, "negative id", 400, 1001, body=with_id(-1)),
        Bad(endpoint, "id beyond bigint", 400, 1001, body=with_id(BIG)),
        Bad(endpoint, "huge id", 400, 1001, body=with_id(10**400)),
        Bad(endpoint, "list id", 400, 1001, body=with_id([1])),
        Bad(endpoint, "over 64 KiB", 413, 413, body={**with_id(1), "pad": "x" * MAX_CONTENT_LENGTH}),
        Bad(endpoint, "wrong method", 405, 405, method="GET" if endpoint[0] == "POST" else "POST"),
    ]
    return cases


def query_cases(endpoint: tuple[str, str], name: str) -> list[Bad]:
    return [
        Bad(endpoint, "missing", 400, 1001, message=f"缺少参数 {name}"),
        Bad(endpoint, "empty", 400, 1001, query=[(name, "")]),
        *[
            Bad(endpoint, f"{name}={raw}", 400, 1001, query=[(name, raw)])
            for raw in ("abc", "0", "-1", "1.5", "1e3", str(BIG), "9" * 5000, "true", " 1", "١")
        ],
        Bad(endpoint, "repeated", 400, 1001, query=[(name, "1"), (name, "2")]),
        Bad(endpoint, "wrong method", 405, 405, method="POST"),
    ]


def method_only(endpoint: tuple[str, str]) -> list[Bad]:
    return [Bad(endpoint, "wrong method", 405, 405, method="GET" if endpoint[0] == "POST" else "POST")]


SUBMIT = post(f"{USER_PATH}/submitAnswers")
RECORDS = get(f"{USER_PATH}/records")
REPORT_PAGE = get("/reports/<int:record_id>")
SAVE = post(f"{USER_PATH}/saveAnswers")
EVENTS = get(f"{ADMIN_PATH}/assessmentRecord/events")
ANSWER = {"questionId": 1, "value": 3}
#: Bad answer lists, refused by both submitAnswers and saveAnswers.
BAD_ANSWERS: list[tuple[str, Any]] = [
    ("object", {"1": 3}),
    ("string", "3,3,3"),
    ("item not an object", [3]),
    ("item without questionId", [{"value": 3}]),
    ("item without value", [{"questionId": 1}]),
    ("value 0", [{"questionId": 1, "value": 0}]),
    ("value 6", [{"questionId": 1, "value": 6}]),
    ("value bool", [{"questionId": 1, "value": True}]),
    ("value string", [{"questionId": 1, "value": "3"}]),
    ("value float", [{"questionId": 1, "value": 3.5}]),
    ("questionId bool", [{"questionId": True, "value": 3}]),
    ("questionId zero", [{"questionId": 0, "value": 3}]),
    ("questionId beyond int4", [{"questionId": 2**31, "value": 3}]),
    ("repeated question", [ANSWER, {"questionId": 1, "value": 4}]),
    ("too many", [{"questionId": i, "value": 3} for i in range(1, 1002)]),
]
#: The owner's record in status 2 (see `world`): saves to it get past the status check.
IN_PROGRESS = 2
BATCH = post(f"{ADMIN_PATH}/assessmentRecord/batchRegenerateReport")
LIST = get(f"{ADMIN_PATH}/assessmentRecord/list")
MATCHING = post(f"{ADMIN_PATH}/assessmentRecord/regenerateMatching")
#: Bad record id lists of the fault drill's start and stop.
DRILL_ID_CASES: list[tuple[str, dict[str, Any]]] = [
    ("missing", {}),
    ("empty", {"ids": []}),
    ("not a list", {"ids": "1,2"}),
    ("string item", {"ids": ["1"]}),
    ("zero item", {"ids": [0]}),
    ("item beyond bigint", {"ids": [BIG]}),
    ("duplicates", {"ids": [1, 1]}),
    ("over the limit", {"ids": list(range(1, MAX_BATCH_IDS + 2))}),
]
TASK = get(f"{ADMIN_PATH}/tasks/<task_id>")

CASES: list[Bad] = [
    *method_only(post(f"{USER_PATH}/createRecord")),
    *body_cases(post(f"{USER_PATH}/startAssessment"), "recordId"),
    *method_only(get(f"{USER_PATH}/questions")),
    *body_cases(SUBMIT, "recordId", {"answers": [ANSWER]}),
    *[
        Bad(SUBMIT, f"answers {name}", 400, 1001, body={"recordId": 1, "answers": answers})
        for name, answers in [("missing", None), ("empty", []), *BAD_ANSWERS]
    ],
    *body_cases(SAVE, "recordId", {"answers": [ANSWER]}),
    *[
        Bad(SAVE, f"answers {name}", 400, 1001, body={"recordId": IN_PROGRESS, "answers": answers})
        for name, answers in [("missing", None), ("empty", []), *BAD_ANSWERS]
    ],
    *[
        Bad(SAVE, f"answers {name}", 400, 1001, body={"recordId": IN_PROGRESS, "answers": answers}, message=m)
        for name, answers, m in [
            ("unknown question", [{"questionId": 999, "value": 3}], "存在不属于本测评的题目：999"),
            ("unknown among known", [{"questionId": 101, "value": 3}, ANSWER], "存在不属于本测评的题目：1"),
        ]
    ],
    *query_cases(get(f"{USER_PATH}/resultStatus"), "recordId"),
    *query_cases(get(f"{USER_PATH}/report"), "recordId"),
    *query_cases(get(f"{USER_PATH}/record"), "recordId"),
    *method_only(get(f"{USER_PATH}/records")),
    *[
        Bad(RECORDS, name, 400, 1001, query=query)
        for name, query in [
            ("size 0", [("size", "0")]),
            ("size 101", [("size", "101")]),
            ("size text", [("size", "all")]),
            ("cursor 0", [("cursor", "0")]),
            ("cursor beyond bigint", [("cursor", str(BIG))]),
            ("cursor text", [("cursor", "next")]),
            ("repeated cursor", [("cursor", "5"), ("cursor", "3")]),
        ]
    ],
    Bad(REPORT_PAGE, "wrong method", 405, 405, method="POST", url="/reports/4", page=True),
    Bad(REPORT_PAGE, "forged link", 401, 401, query=[("s", "forged")], url="/reports/4", page=True),
    Bad(REPORT_PAGE, "another user's record", 404, 3241, url="/reports/9", page=True),
    Bad(REPORT_PAGE, "id beyond bigint", 404, 404, url=f"/reports/{BIG}", page=True),
    Bad(REPORT_PAGE, "negative id", 404, 404, url="/reports/-4", page=True),
    *body_cases(post(f"{ADMIN_PATH}/assessmentRecord/regenerateReport"), "id"),
    *body_cases(post(f"{ADMIN_PATH}/assessmentRecord/delete"), "id"),
    *[
        Bad(BATCH, f"ids {name}", 400, 1001, body=body, message=message)
        for name, body, message in [
            ("missing", {}, MSG_EMPTY_ID_LIST),
            ("null", {"ids": None}, MSG_EMPTY_ID_LIST),
            ("empty", {"ids": []}, MSG_EMPTY_ID_LIST),
            ("number", {"ids": 1}, None),
            ("string", {"ids": "1,2"}, None),
            ("object", {"ids": {"0": 1}}, None),
            ("string item", {"ids": [1, "2"]}, None),
            ("bool item", {"ids": [True]}, None),
            ("float item", {"ids": [1.0]}, None),
            ("zero item", {"ids": [1, 0]}, None),
            ("negative item", {"ids": [-5]}, None),
            ("item beyond bigint", {"ids": [BIG]}, None),
            ("null item", {"ids": [1, None]}, None),
            ("duplicates", {"ids": [1, 2, 1]}, "参数 ids 不能包含重复的 ID"),
            (
                "over the limit",
                {"ids": list(range(1, MAX_BATCH_IDS + 2))},
                f"参数 ids 最多包含 {MAX_BATCH_IDS} 个 ID",
            ),
        ]
    ],
    Bad(BATCH, "no content type", 415, 415, raw='{"ids": [1]}', content_type=None),
    Bad(BATCH, "malformed JSON", 400, 1001, raw='{"ids": [1,'),
    Bad(BATCH, "array body", 400, 1001, body=[1, 2]),
    Bad(BATCH, "over 64 KiB", 413, 413, body={"ids": [1], "pad": "x" * MAX_CONTENT_LENGTH}),
    Bad(BATCH, "wrong method", 405, 405, method="GET"),
    *[
        Bad(MATCHING, name, 400, 1001, body=body)
        for name, body in [
            ("no status", {}),
            ("null status", {"status": None}),
            ("status 4", {"status": 4}),
            ("status text", {"status": "5"}),
            ("status bool", {"status": True}),
            ("status float", {"status": 5.0}),
            ("userId 0", {"status": 5, "userId": 0}),
            ("userId text", {"status": 5, "userId": "7"}),
            ("userId beyond bigint", {"status": 5, "userId": BIG}),
            ("submittedFrom garbage", {"status": 5, "submittedFrom": "yesterday"}),
            ("submittedFrom number", {"status": 5, "submittedFrom": 20250101}),
            ("submittedTo out of calendar", {"status": 5, "submittedTo": "9999-12-31T23:59:59-08:00"}),
            (
                "submittedFrom after submittedTo",
                {"status": 5, "submittedFrom": "2025-02-01T00:00:00Z", "submittedTo": "2025-01-01T00:00:00Z"},
            ),
        ]
    ],
    Bad(MATCHING, "no content type", 415, 415, raw='{"status": 5}', content_type=None),
    Bad(MATCHING, "malformed JSON", 400, 1001, raw='{"status": 5,'),
    Bad(MATCHING, "array body", 400, 1001, body=[5]),
    Bad(MATCHING, "over 64 KiB", 413, 413, body={"status": 5, "pad": "x" * MAX_CONTENT_LENGTH}),
    Bad(MATCHING, "wrong method", 405, 405, method="GET"),
    Bad(TASK, "unknown task", 404, 3241, url=f"{ADMIN_PATH}/tasks/{'0' * 32}"),
    Bad(TASK, "malformed task id", 404, 3241, url=f"{ADMIN_PATH}/tasks/x%00y"),
    Bad(TASK, "wrong method", 405, 405, method="POST", url=f"{ADMIN_PATH}/tasks/{'0' * 32}"),
    *[
        Bad(LIST, name, 400, 1001, query=query)
        for name, query in [
            ("status 0", [("status", "0")]),
            ("status 6", [("status", "6")]),
            ("status text", [("status", "done")]),
            ("userId 0", [("userId", "0")]),
            ("userId beyond bigint", [("userId", str(BIG))]),
            ("includeDeleted maybe", [("includeDeleted", "maybe")]),
            ("createdFrom garbage", [("createdFrom", "yesterday")]),
            ("createdTo out of calendar", [("createdTo", "9999-12-31T23:59:59-08:00")]),
            ("createdFrom after createdTo", [("createdFrom", "2025-02-01"), ("createdTo", "2025-01-01")]),
            ("page 0", [("page", "0")]),
            ("page beyond limit", [("page", str(2**31))]),
            ("page text", [("page", "last")]),
            ("pageSize 0", [("pageSize", "0")]),
            ("pageSize 101", [("pageSize", "101")]),
            ("repeated page", [("page", "1"), ("page", "2")]),
        ]
    ],
    Bad(LIST, "wrong method", 405, 405, method="POST"),
    *query_cases(EVENTS, "id"),
    *[
        Bad(EVENTS, name, 400, 1001, query=[("id", "1"), *query])
        for name, query in [
            ("page 0", [("page", "0")]),
            ("page beyond limit", [("page", str(2**31))]),
            ("pageSize 0", [("pageSize", "0")]),
            ("pageSize 101", [("pageSize", "101")]),
            ("pageSize text", [("pageSize", "all")]),
        ]
    ],
    *method_only(get(f"{ADMIN_PATH}/queue/stats")),
    *[
        Bad(endpoint, f"{name} [{field}]", 400, 1001, body=body)
        for endpoint, field in (
            (post(f"{ADMIN_PATH}/queue/dead/requeue"), "ids"),
            (post(f"{ADMIN_PATH}/queue/dead/delete"), "ids"),
            (post(f"{ADMIN_PATH}/queue/invalid/delete"), "keys"),
            (post(f"{ADMIN_PATH}/queue/delayed/retryNow"), "ids"),
            (post(f"{ADMIN_PATH}/queue/delayed/delete"), "ids"),
        )
        for name, body in [
            ("missing", {}),
            ("empty", {field: []}),
            ("not a list", {field: "abc"}),
            ("int item", {field: [1]}),
            ("empty item", {field: [""]}),
            ("duplicates", {field: ["a", "a"]}),
            ("too long item", {field: ["x" * 65]}),
            ("NUL in item", {field: ["a\u0000b"]}),
            ("over the limit", {field: [f"h{i}" for i in range(MAX_BATCH_IDS + 1)]}),
        ]
    ],
    *[
        Bad(endpoint, name, 400, 1001, body=body)
        for endpoint in (
            post(f"{ADMIN_PATH}/queue/dead/requeue"),
            post(f"{ADMIN_PATH}/queue/delayed/retryNow"),
        )
        for name, body in [("all and ids", {"all": True, "ids": ["a"]}), ("all false", {"all": False})]
    ],
    *[
        Bad(endpoint, f"{name} [ids]", 400, 1001, body={**body, **extra})
        for endpoint, extra in (
            (post(f"{ADMIN_PATH}/drill/start"), {"minutes": 5}),
            (post(f"{ADMIN_PATH}/drill/stop"), {}),
        )
        for name, body in DRILL_ID_CASES
    ],
    *[
        Bad(post(f"{ADMIN_PATH}/drill/start"), name, 400, 1001, body={"ids": [1], "minutes": minutes})
        for name, minutes in [
            ("minutes 0", 0),
            ("minutes beyond a day", 24 * 60 + 1),
            ("minutes text", "60"),
            ("minutes float", 1.5),
            ("minutes bool", True),
        ]
    ],
    Bad(post(f"{ADMIN_PATH}/drill/stop"), "all and ids", 400, 1001, body={"all": True, "ids": [1]}),
    Bad(post(f"{ADMIN_PATH}/drill/stop"), "all false", 400, 1001, body={"all": False}),
    *[
        Bad(endpoint, name, status, status, **kwargs)  # type: ignore[arg-type]
        for endpoint in (
            post(f"{ADMIN_PATH}/queue/dead/requeue"),
            post(f"{ADMIN_PATH}/queue/dead/delete"),
            post(f"{ADMIN_PATH}/queue/invalid/delete"),
            post(f"{ADMIN_PATH}/queue/invalid/purge"),
            post(f"{ADMIN_PATH}/queue/delayed/retryNow"),
            post(f"{ADMIN_PATH}/queue/delayed/delete"),
            post(f"{ADMIN_PATH}/drill/start"),
            post(f"{ADMIN_PATH}/drill/stop"),
        )
        for name, status, kwargs in [
            ("no content type", 415, {"raw": "{}", "content_type": None}),
            ("form", 415, {"raw": "all=1", "content_type": "application/x-www-form-urlencoded"}),
            ("wrong method", 405, {"method": "GET"}),
        ]
    ],
    Bad(post(f"{ADMIN_PATH}/queue/invalid/purge"), "array body", 400, 1001, body=[]),
    *[
        Bad(endpoint, name, 400, 1001, query=query)
        for endpoint in (
            get(f"{ADMIN_PATH}/queue/dead"),
            get(f"{ADMIN_PATH}/queue/invalid"),
            get(f"{ADMIN_PATH}/queue/delayed"),
            get(f"{ADMIN_PATH}/audit"),
        )
        for name, query in [
            ("offset -1", [("offset", "-1")]),
            ("offset text", [("offset", "x")]),
            ("limit 0", [("limit", "0")]),
            ("limit 201", [("limit", "201")]),
            ("repeated limit", [("limit", "1"), ("limit", "2")]),
        ]
    ],
    *[
        Bad(get(f"{ADMIN_PATH}/audit"), name, 400, 1001, query=query)
        for name, query in [
            ("since garbage", [("since", "yesterday")]),
            ("since after until", [("since", "2025-02-01"), ("until", "2025-01-01")]),
            ("actor with NUL", [("actor", "a\x00b")]),
            ("actor too long", [("actor", "a" * 65)]),
            ("action too long", [("action", "a" * 65)]),
        ]
    ],
    *method_only(get(f"{ADMIN_PATH}/queue/dead")),
    *method_only(get(f"{ADMIN_PATH}/queue/invalid")),
    *method_only(get(f"{ADMIN_PATH}/queue/delayed")),
    *method_only(get(f"{ADMIN_PATH}/drill")),
    *method_only(get(f"{ADMIN_PATH}/audit")),
    *method_only(get("/")),
    *method_only(get("/favicon.ico")),
    *method_only(get("/healthz")),
    *method_only(get("/readyz")),
    *method_only(get("/healthz/workers")),
    *method_only(get("/metrics")),
    *method_only(get("/openapi.json")),
]


def test_the_table_covers_every_endpoint(app: Flask) -> None:
    # The admin console's HTML forms have their own tests (tests/unit/test_console_auth.py).
    endpoints = {
        (method, rule.rule)
        for rule in app.url_map.iter_rules()
        if not rule.endpoint.startswith("console.")
        for method in (rule.methods or set()) - IMPLICIT_METHODS
    }
    assert {case.endpoint for case in CASES} == endpoints


@pytest.fixture
def world(records: Records, redis_client: redis.Redis) -> Records:
    """Records of every status (the owner's ids are 1-5, others' 6-10) and a queued job."""
    records.insert(
        *[RecordSpec(status=s, user_id=OWNER, results=s == 4) for s in range(1, 6)],
        *[RecordSpec(status=s, user_id=OWNER + 1, results=s == 4) for s in range(1, 6)],
    )
    redis_client.lpush(REPORT_QUEUE_KEY, '{"RecordId":3,"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}')
    return records


def redis_state(client: redis.Redis) -> dict[bytes | str, Any]:
    return {key: client.dump(key) for key in sorted(client.keys())}


@pytest.mark.parametrize("case", CASES, ids=[f"{c.endpoint[0]} {c.endpoint[1]} [{c.name}]" for c in CASES])
def test_bad_input_is_refused_and_changes_nothing(
    client: FlaskClient,
    admin_headers: dict[str, str],
    user_headers: Headers,
    world: Records,
    redis_client: redis.Redis,
    case: Bad,
) -> None:
    method, path = case.endpoint
    headers = admin_headers if path.startswith(ADMIN_PATH) else user_headers(OWNER)
    before = (world.snapshot(), redis_state(redis_client))
    kwargs: dict[str, Any] = {"headers": headers, "query_string": case.query}
    if case.raw is not None:
        kwargs["data"] = case.raw
    elif case.body is not None:
        kwargs["data"] = json.dumps(case.body)
    if case.content_type is not None and "data" in kwargs:
        kwargs["content_type"] = case.content_type
    response = client.open(case.url or path, method=case.method or method, **kwargs)
    if case.page:
        assert (response.status_code, response.mimetype) == (case.status, "text/html")
        assert (world.snapshot(), redis_state(redis_client)) == before
        return
    body = json_body(response)
    assert response.status_code == case.status, body
    assert body["code"] == case.code
    assert body["data"] is None
    assert body["message"]
    if case.message is not None:
        assert body["message"] == case.message
    assert (world.snapshot(), redis_state(redis_client)) == before
