"""The user's side on the real PostgreSQL and Redis: the report worth reading, resume, paging, the page."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from itsdangerous import TimestampSigner
from sqlalchemy import Engine, text

from config.settings import Settings
from services.domain.questionnaire import LEVELS, load_questionnaire
from services.domain.scoring import level_for
from tests.support.envelope import data, error
from tests.support.records import RecordSpec
from tests.support.reports import levelled_record, levelled_scores
from tests.support.web_app import ADMIN_TOKEN, USER_PATH, Records
from web import create_app
from web.report_page import LINK_MAX_AGE_S

Headers = Callable[[int], dict[str, str]]
ALICE, BOB = 1001, 2002


def completed_record(records: Records, engine: Engine, shift: int = 0, user_id: int = ALICE) -> int:
    return levelled_record(engine, user_id, shift)


def get_report(client: FlaskClient, headers: dict[str, str], record_id: int) -> dict[str, object]:
    report: dict[str, object] = data(
        client.get(f"{USER_PATH}/report", query_string={"recordId": record_id}, headers=headers)
    )
    return report


# -- the report worth reading --------------------------------------------------------------------


def test_every_level_of_every_dimension_is_interpreted(
    client: FlaskClient, user_headers: Headers, records: Records, engine: Engine
) -> None:
    """Four reports put each dimension at each level once: all 32 texts come from the data."""
    questionnaire = load_questionnaire()
    seen: set[tuple[str, str]] = set()
    for shift in range(len(LEVELS)):
        record_id = completed_record(records, engine, shift)
        report = get_report(client, user_headers(ALICE), record_id)
        assert report["questionnaireVersion"] == questionnaire.version
        dimensions = report["dimensions"]
        assert isinstance(dimensions, list)
        for d in dimensions:
            definition = questionnaire.dimension(d["code"])
            assert definition is not None
            assert level_for(d["score"]) == d["level"]
            expected = definition.levels[d["level"]]
            assert d["interpretation"] == expected.interpretation
            assert d["suggestions"] == list(expected.suggestions)
            assert 2 <= len(d["suggestions"]) <= 3
            assert d["description"] == definition.description
            seen.add((d["code"], d["level"]))
    assert seen == {(d.code, level) for d in questionnaire.dimensions for level in LEVELS}


def test_strengths_and_areas_to_develop(
    client: FlaskClient, user_headers: Headers, records: Records, engine: Engine
) -> None:
    record_id = completed_record(records, engine, shift=0)
    report = get_report(client, user_headers(ALICE), record_id)
    scores, levels = levelled_scores(0)
    by_score = sorted(scores, key=lambda code: -scores[code])
    strong = [c for c in by_score if levels[c] in LEVELS[:2]][:3]
    weak = [c for c in reversed(by_score) if levels[c] not in LEVELS[:2]][:3]
    assert [s["code"] for s in report["strengths"]] == strong  # type: ignore[attr-defined]
    assert [a["code"] for a in report["areasToDevelop"]] == weak  # type: ignore[attr-defined]
    assert report["strengths"][0] == {  # type: ignore[index]
        "code": strong[0],
        "name": load_questionnaire().dimension(strong[0]).name,  # type: ignore[union-attr]
        "score": scores[strong[0]],
        "level": levels[strong[0]],
    }


@pytest.mark.parametrize(
    ("status", "message"),
    [(3, "报告生成中，请稍后查看"), (5, "报告生成失败，请联系客服"), (2, "报告尚未生成")],
)
def test_report_of_a_record_without_one(
    client: FlaskClient, user_headers: Headers, records: Records, status: int, message: str
) -> None:
    (record_id,) = records.insert(RecordSpec(status=status, user_id=ALICE))
    response = client.get(
        f"{USER_PATH}/report", query_string={"recordId": record_id}, headers=user_headers(ALICE)
    )
    assert error(response, 409, 2005) == message


def test_times_carry_their_offset(client: FlaskClient, user_headers: Headers, records: Records) -> None:
    (record_id,) = records.insert(RecordSpec(status=4, user_id=ALICE))
    record = data(
        client.get(f"{USER_PATH}/record", query_string={"recordId": record_id}, headers=user_headers(ALICE))
    )
    for key in ("createdAt", "submittedAt", "completedAt"):
        assert datetime.fromisoformat(record[key]).utcoffset() is not None, key


# -- resume --------------------------------------------------------------------------------------


def started_record(client: FlaskClient, headers: dict[str, str]) -> int:
    record_id = int(data(client.post(f"{USER_PATH}/createRecord", headers=headers))["id"])
    data(client.post(f"{USER_PATH}/startAssessment", json={"recordId": record_id}, headers=headers))
    return record_id


def store_answers(engine: Engine, record_id: int, answers: dict[int, int], at: datetime) -> None:
    """Answers as the hot-path flusher leaves them in the database."""
    with engine.begin() as conn:
        for qid, value in answers.items():
            conn.execute(
                text(
                    "INSERT INTO answers (record_id, question_id, value, answered_at)"
                    " VALUES (:r, :q, :v, :at)"
                ),
                {"r": record_id, "q": qid, "v": value, "at": at},
            )


def test_resume_merges_database_and_autosave(
    client: FlaskClient, user_headers: Headers, engine: Engine, redis_client: redis.Redis
) -> None:
    alice = user_headers(ALICE)
    record_id = started_record(client, alice)
    order = [q.id for q in load_questionnaire().questions]
    flushed_at = datetime(2026, 1, 1, tzinfo=UTC)
    # 101-103 already flushed to the database; 103 and 104, 105 saved since (Redis only).
    store_answers(engine, record_id, {101: 1, 102: 2, 103: 3}, flushed_at)
    body = {
        "recordId": record_id,
        "answers": [{"questionId": 103, "value": 5}, {"questionId": 104, "value": 4}],
    }
    data(client.post(f"{USER_PATH}/saveAnswers", json=body, headers=alice))
    body = {"recordId": record_id, "answers": [{"questionId": 105, "value": 2}]}
    saved = data(client.post(f"{USER_PATH}/saveAnswers", json=body, headers=alice))

    record = data(client.get(f"{USER_PATH}/record", query_string={"recordId": record_id}, headers=alice))
    assert (record["status"], record["statusText"], record["reportReady"]) == (2, "测评中", False)
    answers = {a["questionId"]: a["value"] for a in record["answers"]}
    assert answers == {101: 1, 102: 2, 103: 5, 104: 4, 105: 2}
    assert [a["questionId"] for a in record["answers"]] == [101, 102, 103, 104, 105]
    times = {a["questionId"]: datetime.fromisoformat(a["answeredAt"]) for a in record["answers"]}
    assert times[101] == flushed_at
    assert times[105] == datetime.fromisoformat(saved["savedAt"])
    assert record["answeredCount"] == 5
    assert record["totalQuestions"] == len(order)
    assert record["currentQuestionId"] == 105
    assert record["nextQuestionId"] == order[5]
    assert record["autosaveAvailable"] is True

    # What resume showed is what a submission takes: submit nothing more than the rest.
    rest = [{"questionId": q, "value": 3} for q in order[5:]]
    data(
        client.post(
            f"{USER_PATH}/submitAnswers", json={"recordId": record_id, "answers": rest}, headers=alice
        )
    )
    with engine.connect() as conn:
        stored: dict[int, int] = dict(
            conn.execute(
                text("SELECT question_id, value FROM answers WHERE record_id = :r"), {"r": record_id}
            ).all()
        )
    assert {q: stored[q] for q in answers} == answers


def test_resume_with_redis_down_shows_the_database_answers(
    redis_down_app: Flask, user_headers: Headers, records: Records, engine: Engine
) -> None:
    (record_id,) = records.insert(RecordSpec(status=2, user_id=ALICE))
    store_answers(engine, record_id, {101: 4}, datetime(2026, 1, 1, tzinfo=UTC))
    client = redis_down_app.test_client()
    record = data(
        client.get(f"{USER_PATH}/record", query_string={"recordId": record_id}, headers=user_headers(ALICE))
    )
    assert [(a["questionId"], a["value"]) for a in record["answers"]] == [(101, 4)]
    assert record["autosaveAvailable"] is False
    assert record["nextQuestionId"] == 102


def test_resume_of_a_fresh_record(client: FlaskClient, user_headers: Headers) -> None:
    alice = user_headers(ALICE)
    record_id = started_record(client, alice)
    record = data(client.get(f"{USER_PATH}/record", query_string={"recordId": record_id}, headers=alice))
    assert (record["answers"], record["answeredCount"], record["currentQuestionId"]) == ([], 0, None)
    assert record["nextQuestionId"] == load_questionnaire().questions[0].id


# -- paging --------------------------------------------------------------------------------------


def test_paging_is_stable_under_inserts(client: FlaskClient, user_headers: Headers, records: Records) -> None:
    alice = user_headers(ALICE)
    first = records.insert(*(RecordSpec(status=1 + i % 5, user_id=ALICE) for i in range(5)))
    records.insert(RecordSpec(status=1, user_id=BOB))

    page = data(client.get(f"{USER_PATH}/records", query_string={"size": 2}, headers=alice))
    assert [r["id"] for r in page["items"]] == [first[4], first[3]]
    assert (page["total"], page["size"], page["nextCursor"]) == (5, 2, first[3])
    seen = [r["id"] for r in page["items"]]

    newer = records.insert(RecordSpec(status=1, user_id=ALICE), RecordSpec(status=1, user_id=ALICE))
    cursor = page["nextCursor"]
    while cursor is not None:
        page = data(
            client.get(f"{USER_PATH}/records", query_string={"size": 2, "cursor": cursor}, headers=alice)
        )
        seen += [r["id"] for r in page["items"]]
        assert page["total"] == 7
        cursor = page["nextCursor"]
    # Every record of the first listing exactly once, in order; the new ones only on a new first page.
    assert seen == first[::-1]
    fresh = data(client.get(f"{USER_PATH}/records", query_string={"size": 2}, headers=alice))
    assert [r["id"] for r in fresh["items"]] == newer[::-1]


def test_each_listed_record_says_its_status_and_report(
    client: FlaskClient, user_headers: Headers, records: Records
) -> None:
    ids = records.insert(*(RecordSpec(status=s, user_id=ALICE) for s in (1, 2, 3, 4, 5)))
    page = data(client.get(f"{USER_PATH}/records", headers=user_headers(ALICE)))
    rows = {r["id"]: r for r in page["items"]}
    assert [(rows[i]["statusText"], rows[i]["reportReady"]) for i in ids] == [
        ("待测评", False),
        ("测评中", False),
        ("生成中", False),
        ("已完成", True),
        ("生成失败", False),
    ]
    assert datetime.fromisoformat(rows[ids[3]]["completedAt"]).utcoffset() is not None


@pytest.mark.parametrize(
    "query", [{"size": 0}, {"size": 101}, {"size": "x"}, {"cursor": 0}, {"cursor": "abc"}]
)
def test_bad_paging_parameters(client: FlaskClient, user_headers: Headers, query: dict[str, object]) -> None:
    error(client.get(f"{USER_PATH}/records", query_string=query, headers=user_headers(ALICE)), 400, 1001)


# -- the page ------------------------------------------------------------------------------------


def page_url(client: FlaskClient, headers: dict[str, str], record_id: int) -> str:
    url = get_report(client, headers, record_id)["pageUrl"]
    assert isinstance(url, str)
    return url


def test_the_report_link_opens_the_page(
    client: FlaskClient, user_headers: Headers, records: Records, engine: Engine
) -> None:
    record_id = completed_record(records, engine)
    url = page_url(client, user_headers(ALICE), record_id)
    assert urlsplit(url).path == f"/reports/{record_id}"
    response = client.get(url)
    assert response.status_code == 200
    assert response.mimetype == "text/html"
    assert response.headers["Cache-Control"] == "private, no-store"
    assert response.headers["Referrer-Policy"] == "no-referrer"
    page = response.get_data(as_text=True)
    assert '<svg class="radar"' in page
    for dimension in load_questionnaire().dimensions:
        assert dimension.name in page
    # The user token works too, without the link.
    assert client.get(f"/reports/{record_id}", headers=user_headers(ALICE)).status_code == 200


def test_the_page_is_the_owners_only(
    client: FlaskClient, user_headers: Headers, records: Records, engine: Engine
) -> None:
    mine = completed_record(records, engine)
    bobs = completed_record(records, engine, user_id=BOB)
    signed = parse_qs(urlsplit(page_url(client, user_headers(ALICE), mine)).query)["s"][0]
    # A link names its record: it opens no other.
    assert client.get(f"/reports/{bobs}", query_string={"s": signed}).status_code == 401
    assert client.get(f"/reports/{mine}", query_string={"s": signed[:-2] + "xx"}).status_code == 401
    assert client.get(f"/reports/{mine}").status_code == 401
    assert (
        client.get(f"/reports/{mine}", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}).status_code == 401
    )
    assert client.get(f"/reports/{bobs}", headers=user_headers(ALICE)).status_code == 404
    assert client.get(f"/reports/{2**63}", headers=user_headers(ALICE)).status_code == 404


def test_an_expired_or_broken_link_is_a_page_that_says_what_to_do(
    client: FlaskClient,
    user_headers: Headers,
    records: Records,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mine = completed_record(records, engine)
    # A link handed out a week and a minute ago: the product's own signing, its clock set back.
    signed_at = int(time.time()) - LINK_MAX_AGE_S - 60
    with monkeypatch.context() as m:
        m.setattr(TimestampSigner, "get_timestamp", lambda self: signed_at)
        old = parse_qs(urlsplit(page_url(client, user_headers(ALICE), mine)).query)["s"][0]
    for query in ({"s": old}, {"s": old[:-3] + "xyz"}, {}):
        response = client.get(f"/reports/{mine}", query_string=query)
        assert response.status_code == 401
        assert response.mimetype == "text/html"  # a page a reader understands, not JSON
        page = response.get_data(as_text=True)
        assert "报告链接无效或已过期" in page
        assert "重新打开报告" in page
        assert response.headers["Cache-Control"] == "private, no-store"
    missing = client.get(f"/reports/{2**63}", headers=user_headers(ALICE))
    assert (missing.status_code, missing.mimetype) == (404, "text/html")


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/reports/-4", 404),
        ("GET", "/reports/abc", 404),
        ("GET", "/reports/1/extra", 404),
        ("POST", "/reports/1", 405),
        ("GET", "/admin/no-such-page", 404),
        ("POST", "/admin/", 405),
    ],
)
def test_an_address_no_page_serves_answers_its_areas_page_not_json(
    client: FlaskClient, method: str, path: str, status: int
) -> None:
    """No view of the report page or the console runs for these (no rule matches, or not with
    this method): the page of that area answers, as a reader of a mistyped link expects."""
    response = client.open(path, method=method)
    assert (response.status_code, response.mimetype) == (status, "text/html")
    assert f"{status}" in response.get_data(as_text=True)


def test_an_unknown_api_address_still_answers_the_envelope(client: FlaskClient) -> None:
    response = client.get("/api/assessment/no-such-endpoint")
    assert response.mimetype == "application/json"
    assert error(response, 404, 404) == "接口不存在"


@pytest.mark.parametrize(
    ("status", "message"), [(3, "报告生成中，请稍后查看"), (5, "报告生成失败，请联系客服")]
)
def test_the_page_of_a_record_without_a_report_says_why(
    client: FlaskClient, user_headers: Headers, records: Records, status: int, message: str
) -> None:
    (record_id,) = records.insert(RecordSpec(status=status, user_id=ALICE))
    response = client.get(f"/reports/{record_id}", headers=user_headers(ALICE))
    assert response.status_code == 409
    assert response.mimetype == "text/html"
    assert message in response.get_data(as_text=True)


@pytest.mark.parametrize(
    ("zone", "shown"), [(None, "2026-01-01 08:30 (UTC+08:00)"), ("UTC", "2026-01-01 00:30 (UTC+00:00)")]
)
def test_the_page_shows_times_in_the_display_time_zone(
    settings: Settings,
    redis_client: redis.Redis,
    user_headers: Headers,
    records: Records,
    engine: Engine,
    zone: str | None,
    shown: str,
) -> None:
    app = create_app(
        settings if zone is None else settings.with_overrides(display_timezone=zone),
        redis_client=redis_client,
    )
    record_id = levelled_record(engine, ALICE, 1, completed_at=datetime(2026, 1, 1, 0, 30, tzinfo=UTC))
    page = app.test_client().get(f"/reports/{record_id}", headers=user_headers(ALICE)).get_data(as_text=True)
    assert shown in page
