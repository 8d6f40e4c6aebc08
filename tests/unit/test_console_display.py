"""The console's words for what processes, events and audit entries say in English."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from web.console.display import audit_detail_words, doing_words, value_words

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
