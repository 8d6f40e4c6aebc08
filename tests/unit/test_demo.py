"""scripts/demo.py end to end against a fake API: options, exit codes and the summary README shows."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console

from scripts import demo
from scripts.demo_lib import render
from scripts.demo_lib.client import Api
from scripts.demo_lib.simulation import SimUser
from scripts.demo_lib.stats import Latency, percentile

DIMENSIONS = [
    ("linguistic", "语言", 85.0, "优势"),
    ("musical", "音乐", 80.0, "优势"),
    ("logical", "逻辑数学", 40.0, "中等"),
    ("bodily", "身体运动", 35.0, "待发展"),
]
SUMMARY = "在 4 项智能中，你表现最突出的依次是：语言（85.0 分，优势）、音乐（80.0 分，优势）。" * 4
FLAGS = ["--base-url", "http://demo.invalid", "--secret-key", "k", "--admin-token", "a,b"]


class FakeApi(Api):
    """The endpoints the demo calls; every report completes at once, except `failing` records."""

    failing: frozenset[int] = frozenset()

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        self.records: dict[str, list[int]] = {}
        self.next_id = 1

    def check_ready(self, source: str) -> None:
        pass

    def call(self, method: str, path: str, token: str, body: object = None) -> Any:
        now = datetime.now(UTC)
        if path == "/api/assessment/questions":
            return [
                {"id": i, "dimensionCode": code, "dimensionName": name}
                for i, (code, name, _, _) in enumerate(DIMENSIONS, start=1)
            ]
        if path == "/api/assessment/createRecord":
            record_id, self.next_id = self.next_id, self.next_id + 1
            self.records.setdefault(token, []).append(record_id)
            return {"id": record_id}
        if path in ("/api/assessment/startAssessment", "/api/assessment/submitAnswers"):
            return {"status": 3}
        if path == "/api/assessment/records":
            return [
                {
                    "id": r,
                    "status": 5 if r in self.failing else 4,
                    "submittedAt": (now - timedelta(seconds=0.25)).isoformat(),
                    "completedAt": now.isoformat(),
                }
                for r in self.records.get(token, [])
            ]
        if path == "/api/admin/queue/stats":
            assert token == "a"  # the first of ADMIN_TOKENS
            return {"queued": 0, "delayed": 0, "inFlight": 0, "dead": 0, "invalid": 0}
        if path.startswith("/api/assessment/report?recordId="):
            return report(int(path.rsplit("=", 1)[1]))
        raise AssertionError(f"unexpected call {method} {path}")


def report(record_id: int) -> dict[str, Any]:
    return {
        "recordId": record_id,
        "userId": 1001,
        "completedAt": "2026-11-30T05:45:41+00:00",
        "dimensions": [
            {"code": code, "name": name, "score": score, "rank": rank, "level": level}
            for rank, (code, name, score, level) in enumerate(DIMENSIONS, start=1)
        ],
        "topDimensions": ["linguistic", "musical"],
        "summary": SUMMARY,
    }


@pytest.fixture(autouse=True)
def fake_api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(demo, "Api", FakeApi)
    monkeypatch.setattr(FakeApi, "failing", frozenset())
    monkeypatch.setenv("MI_STATE_DIR", str(tmp_path))  # no `make run` state to find
    for name in ("BASE_URL", "SECRET_KEY", "ADMIN_TOKENS", "DEMO_ARGS"):
        monkeypatch.delenv(name, raising=False)


def test_every_report_completed_is_exit_code_0_with_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--records", "7", "--users", "3", "--seed", "7", *FLAGS]) == 0
    out = capsys.readouterr().out
    assert "mi-assessment demo against http://demo.invalid (from --base-url), seed 7" in out
    assert "7 records, 3 users, 4 questions each: user 1001" in out
    assert "reports    7/7 completed · 0 failed · 7/7 submitted" in out  # the line without a terminal
    for figure in (
        "submitted        7/7 records in",
        "(3 users in parallel)",
        "completed        7/7   failed 0   still generating 0   (all done",
        "submit → report  p50 0.25 s   p95 0.25 s   max 0.25 s   (server clock: submittedAt → completedAt)",
        "seen by users    p50",
        "(status polled every 0.1 s, through the same web workers)",
        "queue now        queued 0   delayed 0   inFlight 0   dead 0   invalid 0",
        "多元智能测评报告 · 记录",
        "优势智能：语言、音乐",
        "总结：",
    ):
        assert figure in out, figure


def test_a_failed_report_is_exit_code_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(FakeApi, "failing", frozenset({2}))
    assert demo.main(["--records", "4", "--users", "2", *FLAGS]) == 1
    assert "completed        3/4   failed 1   still generating 0" in capsys.readouterr().out


def test_no_stack_found_is_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--records", "1"]) == 2
    assert "no running stack found" in capsys.readouterr().err


def test_options_are_checked_and_demo_args_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    def run(args: Any) -> int:
        seen.append(args)
        return 0

    monkeypatch.setattr(demo, "run", run)
    monkeypatch.setenv("DEMO_ARGS", "--records 200 --users 8 --timeout 30 --seed 7")
    assert demo.main(["--seed", "8"]) == 0  # the command line comes after DEMO_ARGS, so it wins
    assert [(a.records, a.users, a.timeout, a.seed) for a in seen] == [(200, 8, 30.0, 8)]
    assert demo.parse_args(["--records", "3", "--users", "9"]).users == 3  # never more users than records
    with pytest.raises(SystemExit) as exit_info:
        demo.parse_args(["--records", "0"])
    assert exit_info.value.code == 2


def test_percentiles_are_nearest_rank() -> None:
    values = [0.1 * i for i in range(1, 21)]
    assert percentile(values, 50) == pytest.approx(1.0)
    assert percentile(values, 95) == pytest.approx(1.9)
    assert Latency.of([]) is None
    assert Latency.of([3.0, 1.0, 2.0]) == Latency(2.0, 3.0, 3.0)


def test_the_report_lines_up_and_wraps_chinese_by_cell_width() -> None:
    console = Console(file=io.StringIO(), width=120, color_system=None, markup=False, highlight=False)
    user = SimUser(1001, "文艺型", {}, "token")
    console.print(render.report_view(report(36), user, width=60))
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    bars = [line for line in lines if "█" in line or "░" in line]
    assert len(bars) == len(DIMENSIONS)
    # Each score bar starts in the same terminal column, whatever the width of the name before it.
    starts = {cell_len(line[: min(i for i in (line.find("█"), line.find("░")) if i >= 0)]) for line in bars}
    assert len(starts) == 1
    summary = [line for line in lines if line.strip() and not any(ch in line for ch in "█░")][-3:]
    assert all(cell_len(line.rstrip()) <= 62 for line in summary)  # wrapped at the width asked (+ indent)
    # Nothing of the text is lost in the wrapping (blanks at a break are).
    text = "".join(line.strip() for line in lines).replace(" ", "")
    assert SUMMARY.replace(" ", "") in text
