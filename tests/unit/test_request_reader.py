"""web/request_reader.py: when a request is whole, fed byte by byte or all at once."""

from __future__ import annotations

import pytest

from web.request_reader import MAX_HEAD_BYTES, Progress, RequestReader

CAP = 1000


def fed(data: bytes, *, step: int | None = None) -> RequestReader:
    reader = RequestReader(CAP)
    step = step or len(data) or 1
    for start in range(0, len(data), step):
        reader.feed(data[start : start + step])
    return reader


@pytest.mark.parametrize("step", [1, 7, None])
def test_a_body_of_known_length_is_whole_at_its_last_byte(step: int | None) -> None:
    head = b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n"
    assert fed(head + b"123456789", step=step).progress is Progress.MORE
    assert fed(head + b"1234567890", step=step).progress is Progress.WHOLE


def test_a_request_without_a_body_is_whole_at_its_blank_line() -> None:
    assert fed(b"GET / HTTP/1.1\r\nHost: t\r\n").progress is Progress.MORE
    assert fed(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").progress is Progress.WHOLE


def test_a_length_over_the_cap_is_whole_at_once_for_the_application_to_refuse() -> None:
    assert fed(b"POST /x HTTP/1.1\r\nContent-Length: 5000\r\n\r\nab").progress is Progress.WHOLE


@pytest.mark.parametrize("step", [1, 5, None])
def test_a_chunked_body_is_whole_after_its_last_chunk_and_trailers(step: int | None) -> None:
    head = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = b"5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\n"
    assert fed(head + body, step=step).progress is Progress.MORE
    assert fed(head + body + b"\r\n", step=step).progress is Progress.WHOLE
    assert fed(head + body + b"X-T: 1\r\n", step=step).progress is Progress.MORE
    assert fed(head + body + b"X-T: 1\r\n\r\n", step=step).progress is Progress.WHOLE


def test_a_chunked_body_over_the_cap_is_whole_once_more_than_the_cap_is_there() -> None:
    head = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    big = f"{CAP + 10:x}\r\n".encode()
    assert fed(head + big + b"x" * CAP).progress is Progress.MORE
    assert fed(head + big + b"x" * (CAP + 1)).progress is Progress.WHOLE


@pytest.mark.parametrize(
    "head",
    [
        b"POST /x HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        b"POST /x HTTP/1.1\r\nContent-Length: five\r\n\r\n",
        b"POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
    ids=["two-lengths", "no-number", "gzip", "both", "bad-chunk-size"],
)
def test_framing_gunicorn_refuses_is_handed_over_at_once(head: bytes) -> None:
    assert fed(head).progress is Progress.WHOLE


def test_a_head_over_the_limit_is_too_large() -> None:
    assert (
        fed(b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD_BYTES, step=4096).progress is Progress.HEAD_TOO_LARGE
    )


def test_a_client_waiting_for_100_continue_is_seen_waiting() -> None:
    reader = fed(b"POST /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
    assert reader.waits_for_body
    reader.feed(b"abc")
    assert reader.progress is Progress.WHOLE
    assert not reader.waits_for_body
