"""The API page's curl walkthrough (docs/api.md) reads answers with its `ok` helper, run here as printed: a
success gives its field, a refusal (a 409 while a task runs, a 404) says its code and message
and fails the command, never with a Python traceback."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from services.domain.errors import InvalidOperation, RecordNotFound

API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def helper() -> str:
    """The `ok` function as the API page defines it."""
    match = re.search(r"^ok\(\) \{.*?; \}$", API_PAGE.read_text(), re.MULTILINE | re.DOTALL)
    assert match, "the API page's walkthrough defines ok()"
    return match.group(0)


def run(answer: object, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f'{helper()}\nok "$@"', "ok", *args],
        input=json.dumps(answer, ensure_ascii=False),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_a_success_gives_its_field_or_its_data() -> None:
    assert (
        run({"code": 0, "message": "success", "data": {"taskId": "t-1", "matched": 3}}, "taskId").stdout
        == "t-1\n"
    )
    assert run({"code": 0, "message": "success", "data": {"id": 42}}, "id").stdout == "42\n"
    whole = run({"code": 0, "message": "success", "data": [{"id": 101, "text": "题目"}]})
    assert json.loads(whole.stdout) == [{"id": 101, "text": "题目"}]


@pytest.mark.parametrize(
    "refusal",
    [
        {"code": InvalidOperation.code, "message": "相同条件的任务尚未结束：t-1", "data": None},
        {"code": RecordNotFound.code, "message": "测评记录不存在", "data": None},
    ],
)
def test_a_refusal_says_its_code_and_message_and_fails(refusal: dict[str, object]) -> None:
    done = run(refusal, "taskId")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip() == f"refused: {refusal['code']} {refusal['message']}"
    assert "Traceback" not in done.stderr


def test_every_answer_the_walkthrough_reads_goes_through_ok() -> None:
    """No `python3 -c` reading `["data"]` straight from curl is left: each would print a traceback."""
    text = API_PAGE.read_text()
    walkthrough = text.split("```sh", 1)[1].split("| method | path |", 1)[0]
    assert 'json.load(sys.stdin)["data"]' not in walkthrough
    assert walkthrough.count("| ok") >= 4  # the record, its page, the questions, the task
