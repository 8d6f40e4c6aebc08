"""tests/support/parts.py: the files split into parts of about equal time, each once."""

from __future__ import annotations

import pytest

from tests.support import parts


@pytest.mark.parametrize("n", [2, 4])
def test_every_file_goes_to_exactly_one_part_and_the_parts_are_balanced(n: int) -> None:
    files = set(parts.FILE_SECONDS) | {"tests/e2e/test_new_and_unmeasured.py", "tests/unit/test_small.py"}
    split = parts.split_files(files, n)
    assert set().union(*split) == files
    assert sum(len(part) for part in split) == len(files)

    def seconds(part: set[str]) -> float:
        return sum(parts.seconds(f) for f in part)

    totals = [seconds(part) for part in split]
    # LPT: the parts differ by at most the longest file.
    assert max(totals) - min(totals) <= max(parts.FILE_SECONDS.values())


def test_the_split_is_the_same_whatever_the_order_files_are_collected_in() -> None:
    files = ["tests/a.py", "tests/b.py", "tests/c.py", *parts.FILE_SECONDS]
    assert parts.split_files(set(files), 4) == parts.split_files(set(reversed(files)), 4)


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0"])
def test_a_malformed_part_is_a_usage_error(text: str) -> None:
    with pytest.raises(pytest.UsageError):
        parts.parse_part(text)


def test_a_part_is_parsed() -> None:
    assert parts.parse_part("2/4") == (2, 4)


def test_every_test_runs_in_exactly_one_part_and_a_part_imports_only_its_files(
    pytester: pytest.Pytester,
) -> None:
    log = pytester.path / "imported.log"
    for n in range(6):
        pytester.makepyfile(
            **{f"test_f{n}": f"open({str(log)!r}, 'a').write('f{n}\\n')\ndef test_{n}(): pass\n"}
        )
    ran: list[str] = []
    for k in (1, 2, 3):
        result = pytester.runpytest("-p", "tests.support.parts", "--part", f"{k}/3", "-v")
        assert result.ret == 0, result.outlines
        ran += [line.split("::")[1].split()[0] for line in result.outlines if "PASSED" in line]
    assert sorted(ran) == [f"test_{n}" for n in range(6)]
    assert sorted(log.read_text().split()) == [f"f{n}" for n in range(6)]  # each file imported once
