"""The console's words for what processes, events and audit entries say in English."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from redis_adapters.report_message import InvalidReportMessage, ReportQueueMessage
from web.console.display import (
    actor_words,
    audit_detail_words,
    credential_words,
    doing_words,
    event_facts,
    invalid_reason_words,
    until_words,
    value_words,
)

SHANGHAI = ZoneInfo("Asia/Shanghai")


def test_what_a_process_does_in_words() -> None:
    assert doing_words("idle") == "空闲"
    assert doing_words("stopped") == "已停止"
    assert doing_words("serving 3 connection(s)") == "处理 3 个连接"
    assert doing_words("report 42, report 43") == "生成报告：记录 42、43"
    assert doing_words("regenerate_matching 0123456789abcdef") == "后台任务 01234567"
    assert doing_words("flushing answers") == "写入作答"
    assert doing_words("something new") == "something new"  # unknown: as it is


def test_event_values_are_words_not_python_reprs() -> None:
    assert value_words(True) == "是"
    assert value_words(False) == "否"
    assert value_words(None) == "—"
    assert value_words([101, 102]) == "101、102"
    assert value_words(3) == "3"


def test_audit_details_in_words() -> None:
    assert audit_detail_words("all; 2 requeued, 1 skipped", SHANGHAI) == "全部；重新入队 2 项，跳过 1 项"
    assert audit_detail_words("queue unavailable", SHANGHAI) == "队列不可用（Redis）"
    assert (
        audit_detail_words("1 deleted, 0 skipped; records set to status 5: 7", SHANGHAI)
        == "删除 1 项，跳过 0 项；记录置为“生成失败”：7"
    )
    assert (
        audit_detail_words("status=5 submittedFrom=2026-12-01T00:00:00+00:00; 3 matched", SHANGHAI)
        == "状态 5 提交时间从 2026-12-01 08:00:00；匹配 3 项"
    )
    assert (
        audit_detail_words("30 min, until 2026-12-01T00:30:00+00:00", SHANGHAI)
        == "30 分钟，至 2026-12-01 08:30:00"
    )
    assert audit_detail_words(None, SHANGHAI) == ""
    assert audit_detail_words("2005 当前状态不允许重新生成", SHANGHAI) == "2005 当前状态不允许重新生成"


#: Every field the services, actors, web and reconciler write in an event's data (grep for
#: `data=` and `log_event(`), with a value each writes.
EVENT_DATA = {
    "attempt": 2,
    "error": "FaultDrillFailure: 故障演练",
    "retries": 3,
    "lostDeliveries": 4,
    "statusSet": True,
    "batch": True,
    "deadLetter": True,
    "requested": 12,
    "enqueued": False,
    "reason": "no job alive in Redis",
    "questionIds": [101, 102],
    "answeredCount": 2,
    "task": "0123456789abcdef",
    "messageIds": ["d954af5c3d4c672f"],
}


def test_an_events_data_reads_as_sentences_without_keys_or_reprs() -> None:
    facts = event_facts(EVENT_DATA)
    assert facts == [
        "已答 2 题",
        "第 2 次尝试",
        "批量操作",
        "从死信队列重新入队",
        "未能加入生成队列（Redis 不可用），由对账补发",
        "随 worker 丢失 4 次，不再重试",
        "删除的延迟重试 d954af5c3d4c672f",
        "题目 101、102",
        "Redis 中没有该记录的任务",
        "本批共 12 条",
        "已重试 3 次",
        "记录已置为“生成失败”",
        "后台任务 01234567",
    ]
    text = "".join(facts)
    for raw in (*EVENT_DATA, "True", "False", "None"):
        assert raw not in text, raw
    assert event_facts({"attempt": None}) == []  # nothing to tell
    assert event_facts({"newField": 1}) == ["其他（newField）：1"]  # named, never dropped


def test_actors_and_credentials_in_words() -> None:
    assert actor_words("console:张三") == "管理后台 · 张三"
    assert actor_words("admin:1a2b3c4d5e6f") == "管理接口 · 1a2b3c4d5e6f"
    assert actor_words("cli:root") == "命令行 · root"
    assert actor_words("user:1001") == "用户 1001"
    assert actor_words("worker") == "报告生成 worker"
    assert actor_words("reconciler") == "对账 reconciler"
    assert credential_words("admin-token 1a2b3c4d5e6f") == "管理员凭证 1a2b3c4d5e6f"
    assert credential_words("shell root@vm") == "命令行 root@vm"


def test_a_due_time_reads_as_time_left() -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    assert until_words(now + timedelta(seconds=185), now) == "3 分 5 秒后"
    assert until_words(now - timedelta(seconds=1), now) == "已到期，即将执行"


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b"not json \xff", "不是合法的 JSON"),
        (b"[" * 100_000, "不是合法的 JSON"),
        (b"[1, 2]", "不是 JSON 对象，而是数组"),
        (b'{"RecordId": 1}', "缺少字段 RetryCount、EnqueueTime"),
        (b'{"RecordId": "x", "RetryCount": 0, "EnqueueTime": "2025-01-15T10:30:00"}', "RecordId 不是"),
        (b'{"RecordId": 1, "RetryCount": -1, "EnqueueTime": "2025-01-15T10:30:00"}', "RetryCount 不是"),
        (b'{"RecordId": 1, "RetryCount": 0, "EnqueueTime": 5}', "EnqueueTime 不是"),
        (b'{"RecordId": 1, "RetryCount": 0, "EnqueueTime": "yesterday"}', "EnqueueTime 不是"),
    ],
)
def test_why_a_payload_is_invalid_in_words(payload: bytes, words: str) -> None:
    """Each reason the worker's decoder gives, as the invalid-messages page shows it."""
    with pytest.raises(InvalidReportMessage) as refused:
        ReportQueueMessage.decode(payload)
    shown = invalid_reason_words(str(refused.value))
    assert shown.startswith(words), shown
    assert "must be" not in shown
    assert "got" not in shown
