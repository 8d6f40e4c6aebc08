"""tests/support/slow_parts.py: the slow files split into parts of about equal time, each once."""

from __future__ import annotations

import pytest

from tests.support import slow_parts


def test_every_file_goes_to_exactly_one_part_and_the_parts_are_balanced() -> None:
    files = set(slow_parts.FILE_SECONDS) | {"tests/e2e/test_new_and_unmeasured.py"}
    parts = slow_parts.split_files(files, 2)
    assert parts[0] | parts[1] == files
    assert parts[0].isdisjoint(parts[1])

    def seconds(part: set[str]) -> float:
        return sum(slow_parts.FILE_SECONDS.get(f, slow_parts.DEFAULT_FILE_SECONDS) for f in part)

    heaviest = max(slow_parts.FILE_SECONDS.values())
    # LPT: the parts differ by at most the longest file.
    assert abs(seconds(parts[0]) - seconds(parts[1])) <= heaviest


def test_the_split_is_the_same_whatever_the_order_files_are_collected_in() -> None:
    files = ["tests/a.py", "tests/b.py", "tests/c.py", *slow_parts.FILE_SECONDS]
    assert slow_parts.split_files(set(files), 2) == slow_parts.split_files(set(reversed(files)), 2)


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0"])
def test_a_malformed_part_is_a_usage_error(text: str) -> None:
    with pytest.raises(pytest.UsageError):
        slow_parts.parse_part(text)


def test_a_part_is_parsed() -> None:
    assert slow_parts.parse_part("2/2") == (2, 2)
