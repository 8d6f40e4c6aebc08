"""Texts that must show as what they are (docs/security.md): admin names, the
CLI's cells, the access log's redaction, the metrics' method label."""

from __future__ import annotations

import pytest

from services.domain.limits import MAX_ADMIN_NAME_LENGTH, admin_name, escape_controls, is_display_text
from web.gunicorn_logging import REDACTED, RedactedAtoms, redact
from web.http_metrics import OTHER, method_label


@pytest.mark.parametrize(
    ("typed", "name"),
    [
        ("张三", "张三"),
        ("  王   五 ", "王 五"),
        ("李\u3000四", "李 四"),  # an ideographic space is a space
        ("", ""),
        ("x" * MAX_ADMIN_NAME_LENGTH, "x" * MAX_ADMIN_NAME_LENGTH),
    ],
)
def test_a_typed_name_is_kept_with_its_spaces_made_single(typed: str, name: str) -> None:
    assert admin_name(typed) == name


@pytest.mark.parametrize(
    "typed",
    [
        "nul\x00",
        "esc\x1b[31m",
        "bell\x07",
        "del\x7f",
        "c1\x85",
        "rlo\u202e",
        "lri\u2066",
        "zwsp\u200b",
        "bom\ufeff",
        "private\ue000",
        "line\u2028sep",
        "x" * (MAX_ADMIN_NAME_LENGTH + 1),
    ],
)
def test_a_name_that_would_not_show_as_itself_is_refused(typed: str) -> None:
    assert admin_name(typed) is None


def test_display_text_is_bounded_and_printable() -> None:
    assert is_display_text("console:张三", 64)
    assert not is_display_text("", 64)
    assert not is_display_text("a" * 65, 64)
    assert not is_display_text("a\x00", 64)


def test_control_characters_are_printed_escaped() -> None:
    assert escape_controls("ok 张三") == "ok 张三"
    assert escape_controls("\x1b[2Jred\x07") == "\\x1b[2Jred\\x07"
    assert escape_controls("a\u202eb\nc") == "a\\u202eb\\nc"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("GET /reports/5?s=eyJ.abc.def HTTP/1.1", f"GET /reports/5?s={REDACTED} HTTP/1.1"),
        ("s=abc&x=1", f"s={REDACTED}&x=1"),
        ("/r?x=1&s=abc;y", f"/r?x=1&s={REDACTED};y"),
        ("https://h/reports/1%3Fs=abc", f"https://h/reports/1%3Fs={REDACTED}"),
        ("/a?sx=1&ss=2", "/a?sx=1&ss=2"),
        # The name as Werkzeug reads it: percent-decoded ("%73" is "s"), in any case.
        ("GET /reports/5?%73=eyJ.abc HTTP/1.1", f"GET /reports/5?%73={REDACTED} HTTP/1.1"),
        ("/reports/5?x=1&%53=eyJ.abc", f"/reports/5?x=1&%53={REDACTED}"),
        ("https://h/reports/1%3F%2573=abc", f"https://h/reports/1%3F%2573={REDACTED}"),
        ("%73=abc", f"%73={REDACTED}"),
    ],
)
def test_the_signature_of_a_report_link_is_redacted(line: str, expected: str) -> None:
    assert redact(line) == expected


def test_an_access_line_s_atoms_are_redacted_and_their_quotes_escaped() -> None:
    atoms = RedactedAtoms(
        {
            "r": "GET /reports/5?s=eyJ.abc HTTP/1.1",
            "{referer}i": 'https://h/reports/5?S=eyJ.abc&x="1"',
            "{user-agent}i": 'curl "7"',
            "s": 200,
        }
    )
    assert atoms["r"] == f"GET /reports/5?s={REDACTED} HTTP/1.1"
    assert atoms["{Referer}i"] == f'https://h/reports/5?S={REDACTED}&x=\\"1\\"'
    assert atoms["{user-agent}i"] == 'curl \\"7\\"'
    assert atoms["s"] == 200
    assert atoms["{missing}i"] == "-"


def test_only_standard_methods_are_labelled_by_name() -> None:
    assert method_label("GET") == "GET"
    assert method_label("ZQ123") == OTHER
    assert method_label("get") == OTHER
