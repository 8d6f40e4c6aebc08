"""scripts.test_shards: its shards, and each shard's failed tests named again at the end of its output."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from scripts.test_shards import PARTS, _relay, shards


def test_relay_prefixes_every_line_and_keeps_the_failed_tests(capsys: pytest.CaptureFixture[str]) -> None:
    output = io.StringIO(
        "tests/a.py .F\n"
        "=== short test summary info ===\n"
        "FAILED tests/a.py::test_b - assert 1 == 2\n"
        "ERROR tests/c.py::test_d - RuntimeError\n"
        "=== 1 failed, 1 passed, 1 error in 1.0s ===\n"
    )
    failures: list[str] = []
    _relay("part-1", output, failures)
    assert failures == [
        "[part-1] FAILED tests/a.py::test_b - assert 1 == 2\n",
        "[part-1] ERROR tests/c.py::test_d - RuntimeError\n",
    ]
    printed = capsys.readouterr().out
    assert printed.splitlines()[0] == "[part-1] tests/a.py .F"
    assert len(printed.splitlines()) == 5


def test_every_part_runs_once_and_the_broker_suite_only_when_asked(tmp_path: Path) -> None:
    plain = shards(["-x"], tmp_path, broker_suite=False)
    assert [name for name, _ in plain] == [f"part-{k}" for k in range(1, PARTS + 1)]
    for k, (_, command) in enumerate(plain, start=1):
        assert command[command.index("--part") + 1] == f"{k}/{PARTS}"
        assert command[command.index("--basetemp") + 1] == str(tmp_path / f"part-{k}")
        assert command[-1] == "-x"
    with_broker = shards([], None, broker_suite=True)
    assert [name for name, _ in with_broker][-1] == "broker"
    assert with_broker[-1][1][-2:] == ["-m", "scripts.broker_suite"]


def test_the_number_of_parts_can_be_chosen() -> None:
    chosen = shards([], None, broker_suite=False, parts=2)
    assert [command[command.index("--part") + 1] for _, command in chosen] == ["1/2", "2/2"]
