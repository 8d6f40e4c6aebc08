"""The broker's hot-path calls (listbroker.connections.run_on): when a command is sent again, when not."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from listbroker.connections import run_on


class FakeConnection:
    """Fails the first `send_failures` sends, or every read, as a dropped connection would."""

    def __init__(self, *, send_failures: int = 0, read_fails: bool = False, reply: Any = 1) -> None:
        self.send_failures = send_failures
        self.read_fails = read_fails
        self.reply = reply
        self.sent: list[tuple[Any, ...]] = []
        self.disconnects = 0
        self.connects = 0
        self.is_connected = False

    def connect(self) -> None:
        self.connects += 1
        self.is_connected = True

    def send_command(self, *args: Any) -> None:
        if self.send_failures:
            self.send_failures -= 1
            raise redis.ConnectionError("Error 32 while writing to socket. Broken pipe.")
        self.sent.append(args)

    def read_response(self) -> Any:
        if self.read_fails:
            raise redis.ConnectionError("Connection closed by server.")
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply

    def disconnect(self) -> None:
        self.disconnects += 1
        self.is_connected = False


def test_a_command_that_never_left_is_sent_again_once() -> None:
    conn = FakeConnection(send_failures=1, reply=7)
    assert run_on(conn, ("LPUSH", "q", "m")) == 7  # type: ignore[arg-type]
    assert conn.sent == [("LPUSH", "q", "m")]
    assert conn.disconnects == 1


def test_a_connection_is_opened_by_its_own_connect_first_and_after_a_failed_send() -> None:
    """`connect()` is where a Sentinel-managed connection asks for the master: `send_command`
    alone would open the socket to the last (or default) address."""
    conn = FakeConnection(send_failures=1)
    run_on(conn, ("LPUSH", "q", "m"))  # type: ignore[arg-type]
    assert conn.connects == 2
    run_on(conn, ("LPUSH", "q", "m"))  # type: ignore[arg-type]
    assert conn.connects == 2  # connected: nothing more


def test_a_lost_reply_is_not_retried_and_the_connection_is_dropped() -> None:
    conn = FakeConnection(read_fails=True)
    with pytest.raises(redis.ConnectionError):
        run_on(conn, ("LPUSH", "q", "m"))  # type: ignore[arg-type]
    assert conn.sent == [("LPUSH", "q", "m")]  # the LPUSH may have run: never twice
    assert conn.disconnects == 1


def test_two_failed_sends_give_up() -> None:
    conn = FakeConnection(send_failures=2)
    with pytest.raises(redis.ConnectionError):
        run_on(conn, ("LPUSH", "q", "m"))  # type: ignore[arg-type]
    assert conn.sent == []


def test_an_error_reply_keeps_the_connection() -> None:
    conn = FakeConnection(reply=redis.ResponseError("WRONGTYPE"))
    with pytest.raises(redis.ResponseError):
        run_on(conn, ("LPUSH", "q", "m"))  # type: ignore[arg-type]
    assert conn.disconnects == 0
