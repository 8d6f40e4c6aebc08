"""Record statuses, their texts and descriptions: the one table every layer reads."""

from __future__ import annotations

from enum import IntEnum


class RecordStatus(IntEnum):
    PENDING = 1  # 待测评
    IN_PROGRESS = 2  # 测评中
    GENERATING = 3  # 生成中
    COMPLETED = 4  # 已完成
    FAILED = 5  # 生成失败


#: Bounds of a valid status (the database's CHECK constraint, the API's schema and filters).
MIN_STATUS = int(min(RecordStatus))
MAX_STATUS = int(max(RecordStatus))

STATUS_TEXT: dict[RecordStatus, str] = {
    RecordStatus.PENDING: "待测评",
    RecordStatus.IN_PROGRESS: "测评中",
    RecordStatus.GENERATING: "生成中",
    RecordStatus.COMPLETED: "已完成",
    RecordStatus.FAILED: "生成失败",
}

#: What the user is told about their result, by status.
STATUS_DESCRIPTION: dict[RecordStatus, str] = {
    RecordStatus.PENDING: "测评尚未开始",
    RecordStatus.IN_PROGRESS: "测评进行中，请完成全部题目后提交",
    RecordStatus.GENERATING: "报告生成中，请稍后查看",
    RecordStatus.COMPLETED: "报告已生成",
    RecordStatus.FAILED: "报告生成失败，请联系客服",
}

#: Statuses in which an admin may trigger the report again: stuck generating, or failed.
REGENERATABLE = frozenset({RecordStatus.GENERATING, RecordStatus.FAILED})

#: Statuses in which the owner may still submit answers.
SUBMITTABLE = frozenset({RecordStatus.PENDING, RecordStatus.IN_PROGRESS})


def status_text(status: int) -> str:
    try:
        return STATUS_TEXT[RecordStatus(status)]
    except ValueError:
        return "未知状态"


def status_description(status: int) -> str:
    try:
        return STATUS_DESCRIPTION[RecordStatus(status)]
    except ValueError:
        return ""
