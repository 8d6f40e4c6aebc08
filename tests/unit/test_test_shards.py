"""scripts.test_shards names each shard's failed tests again at the end of its output."""

from __future__ import annotations

import io

import pytest

from scripts.test_shards import _relay


def test_relay_prefixes_every_line_and_keeps_the_failed_tests(capsys: pytest.CaptureFixture[str]) -> None:
    output = io.StringIO(
        "tests/a.py .F\n"
        "=== short test summary info ===\n"
        "FAILED tests/a.py::test_b - assert 1 == 2\n"
        "ERROR tests/c.py::test_d - RuntimeError\n"
        "=== 1 failed, 1 passed, 1 error in 1.0s ===\n"
    )
    failures: list[str] = []
    _relay("slow-1", output, failures)
    assert failures == [
        "[slow-1] FAILED tests/a.py::test_b - assert 1 == 2\n",
        "[slow-1] ERROR tests/c.py::test_d - RuntimeError\n",
    ]
    printed = capsys.readouterr().out
    assert printed.splitlines()[0] == "[slow-1] tests/a.py .F"
    assert len(printed.splitlines()) == 5
