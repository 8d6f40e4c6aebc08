"""How a Dramatiq message is written in a Redis list, per queue.

Most queues hold Dramatiq's own encoding (`DramatiqCodec`). A queue can be given a
codec of its own (`RedisListBroker(codecs={...})`) so other producers can LPUSH jobs
in a format they already speak, and read what the broker writes.
"""

from __future__ import annotations

from typing import Any, Protocol

import dramatiq
from dramatiq.errors import DecodeError

from listbroker.errors import InvalidMessage


class Codec(Protocol):
    """How a queue's messages are written. A codec whose payloads are JSON objects may also
    have a `job_key_field`: the top-level member holding a payload's job key (a positive
    integer), for the index `Q:jobs` (see scripts.py). Its decode must read that member as
    the scripts do (lua/_index.lua, `job_key`), or reject the payload."""

    def encode(self, message: dramatiq.Message[Any]) -> str | bytes:
        """The payload stored in Redis. Raises InvalidMessage if the message cannot be written."""

    def decode(self, payload: bytes) -> dramatiq.Message[Any]:
        """The message a payload stands for. Raises InvalidMessage."""


def job_key_field(codec: Codec) -> str:
    """The codec's job key field, '' when it has none (no index for its queue)."""
    return str(getattr(codec, "job_key_field", ""))


class DramatiqCodec:
    """Dramatiq's own encoding: whatever the global encoder writes (JSON by default,
    `PickleEncoder` or any other), kept as bytes; nothing assumes it is text."""

    job_key_field = ""

    def encode(self, message: dramatiq.Message[Any]) -> bytes:
        return bytes(message.encode())

    def decode(self, payload: bytes) -> dramatiq.Message[Any]:
        try:
            return dramatiq.Message.decode(payload)
        except DecodeError as exc:
            raise InvalidMessage(f"not a Dramatiq message: {exc.__cause__ or exc}") from None
