"""Seed 000's properties 4-7 (admin regeneration), through the HTTP API.

The real app, the real producer and the real Redis: every example inserts its records
with SQL, calls the endpoint with the Flask test client, checks the database and
`report:queue`, then deletes its records and the queue keys, so examples are
independent while the function-scoped fixtures are shared between them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import redis
from flask.testing import FlaskClient
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from werkzeug.test import TestResponse

from redis_adapters.queues import REPORT_QUEUE_KEY
from redis_adapters.report_message import ReportQueueMessage
from services.domain.errors import MSG_REGENERATE_NOT_ALLOWED
from tests.support.envelope import json_body
from tests.support.records import RecordSpec
from tests.support.web_app import ADMIN_PATH, Records

PROPERTY = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

REGENERATE = ADMIN_PATH + "/assessmentRecord/regenerateReport"
BATCH = ADMIN_PATH + "/assessmentRecord/batchRegenerateReport"
MAX_ID = 2**63 - 1

user_ids = st.integers(min_value=1, max_value=MAX_ID)


def planted(status: int, user_id: int, deleted: bool, earlier_report: bool) -> RecordSpec:
    """A record as the product leaves it in `status`; one in 3 or 5 may keep the results of a
    report made before (tests/support/records.py)."""
    return RecordSpec(status, user_id, deleted=deleted, results=earlier_report if status in (3, 5) else None)


record_specs = st.builds(
    planted,
    status=st.integers(min_value=1, max_value=5),
    user_id=user_ids,
    deleted=st.booleans(),
    earlier_report=st.booleans(),
)


@dataclass(frozen=True)
class Env:
    client: FlaskClient
    headers: dict[str, str]
    records: Records
    redis: redis.Redis

    def post(self, path: str, body: object) -> TestResponse:
        return self.client.post(path, json=body, headers=self.headers)

    @contextmanager
    def inserted(self, *specs: RecordSpec) -> Iterator[list[int]]:
        ids = self.records.insert(*specs)
        try:
            yield ids
        finally:
            self.records.delete(ids)
            self.redis.delete(REPORT_QUEUE_KEY)

    def queued(self) -> list[ReportQueueMessage]:
        return [ReportQueueMessage.decode(raw) for raw in self.redis.lrange(REPORT_QUEUE_KEY, 0, -1)]

    def assert_reset(self, record_ids: Sequence[int]) -> None:
        for record_id in record_ids:
            assert self.records.status(record_id) == 3
            assert self.records.result_counts(record_id) == (0, 0)


@pytest.fixture
def env(
    client: FlaskClient, admin_headers: dict[str, str], records: Records, redis_client: redis.Redis
) -> Env:
    return Env(client, admin_headers, records, redis_client)


def eligible(spec: RecordSpec) -> bool:
    return spec.status in (3, 5) and not spec.deleted


# Feature: redis-report-queue, Property 4: 重新生成重置状态并入队
@PROPERTY
@given(
    target=st.builds(
        RecordSpec,
        status=st.sampled_from([3, 5]),
        user_id=user_ids,
        deleted=st.just(False),
        results=st.booleans(),
    ),
    bystanders=st.lists(record_specs, max_size=3),
)
def test_property_4_regenerate_resets_status_and_enqueues(
    env: Env,
    target: RecordSpec,
    bystanders: list[RecordSpec],
) -> None:
    with env.inserted(target, *bystanders) as (record_id, *others):
        before = env.records.snapshot(others)
        response = env.post(REGENERATE, {"id": record_id})
        assert response.status_code == 200, response.json
        assert response.json == {"code": 0, "message": "success", "data": None}
        env.assert_reset([record_id])
        messages = env.queued()
        assert [(m.record_id, m.retry_count) for m in messages] == [(record_id, 0)]
        assert env.records.snapshot(others) == before


# Feature: redis-report-queue, Property 5: 非法状态拒绝重新生成
@PROPERTY
@given(
    target=st.builds(
        RecordSpec,
        status=st.sampled_from([1, 2, 4]),
        user_id=user_ids,
        deleted=st.just(False),
    )
)
def test_property_5_invalid_status_rejects_regeneration(
    env: Env,
    target: RecordSpec,
) -> None:
    with env.inserted(target) as (record_id,):
        before = env.records.snapshot([record_id])
        response = env.post(REGENERATE, {"id": record_id})
        assert response.status_code == 409
        assert response.json == {"code": 2005, "message": MSG_REGENERATE_NOT_ALLOWED, "data": None}
        assert env.records.snapshot([record_id]) == before
        assert env.redis.llen(REPORT_QUEUE_KEY) == 0


# Feature: redis-report-queue, Property 6: 批量重新生成按状态过滤
@PROPERTY
@given(specs=st.lists(record_specs, min_size=1, max_size=20), data=st.data())
def test_property_6_batch_regenerate_filters_by_status(
    env: Env,
    specs: list[RecordSpec],
    data: st.DataObject,
) -> None:
    with env.inserted(*specs) as ids:
        chosen = [i for i, s in zip(ids, specs, strict=True) if eligible(s)]
        skipped = [i for i, s in zip(ids, specs, strict=True) if not eligible(s)]
        before = env.records.snapshot(skipped)
        order = data.draw(st.permutations(ids))
        response = env.post(BATCH, {"ids": order})
        assert response.status_code == 200, response.json
        answer = json_body(response)["data"]
        assert (answer["successCount"], answer["skippedCount"]) == (len(chosen), len(skipped))
        assert [item["id"] for item in answer["items"]] == order
        assert [item["outcome"] == "regenerated" for item in answer["items"]] == [i in chosen for i in order]
        env.assert_reset(chosen)
        assert env.records.snapshot(skipped) == before
        messages = env.queued()
        assert sorted(m.record_id for m in messages) == sorted(chosen)
        assert all(m.retry_count == 0 for m in messages)


# Feature: redis-report-queue, Property 7: 批量操作计数不变量
@PROPERTY
@given(
    specs=st.lists(record_specs, max_size=15),
    missing=st.lists(st.integers(min_value=10**12, max_value=MAX_ID), max_size=15, unique=True),
    data=st.data(),
)
def test_property_7_batch_count_invariant(
    env: Env,
    specs: list[RecordSpec],
    missing: list[int],
    data: st.DataObject,
) -> None:
    with env.inserted(*specs) as ids:
        pool = ids + missing
        assume(pool)
        chosen = data.draw(st.lists(st.sampled_from(pool), min_size=1, unique=True))
        response = env.post(BATCH, {"ids": chosen})
        assert response.status_code == 200, response.json
        counts = json_body(response)["data"]
        assert counts["successCount"] >= 0
        assert counts["skippedCount"] >= 0
        assert counts["successCount"] + counts["skippedCount"] == len(chosen)
        assert counts["successCount"] == env.redis.llen(REPORT_QUEUE_KEY)
