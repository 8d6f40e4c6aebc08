"""Script calls of the Redis adapters sent together (`services.domain.prepared.PreparedCall` on Redis).

Calls made ready on the same client go in one pipeline without MULTI: one round trip, each
script's reply (or error) its own, in the order given; not atomic, as calls sent one by one
are not. The pipeline sends EVALSHA by hand: redis-py's pipeline, given a `Script`, would ask
the server whether each script is loaded first (SCRIPT EXISTS), a round trip of its own. A
script the server does not know (restarted or flushed since) is sent again alone, which loads it.

On a Redis Cluster, or with calls of other clients or stores, each is sent on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from services.domain.prepared import PreparedCall


def _no_error(reply: Any) -> Exception | None:
    return None


@dataclass(frozen=True)
class ScriptCall:
    """A Lua script's call made ready, on `through` or the client the script is registered on.
    Its outcome: `failed` makes one of a Redis error (the store's own error, e.g.
    QueueUnavailable; or None when the store handles it itself, as the event sink's fallback
    does), `replied` one of the script's reply (by default None: done)."""

    script: Script
    keys: Sequence[str]
    args: Sequence[Any]
    failed: Callable[[redis.RedisError], Exception | None]
    replied: Callable[[Any], Exception | None] = _no_error
    #: The client it goes through; by default the one the script is registered on.
    through: redis.Redis | None = None

    @property
    def client(self) -> Any:
        return self.through if self.through is not None else self.script.registered_client

    def send(self, *others: PreparedCall) -> list[Exception | None]:
        calls = (self, *others)
        client = self.client
        if (
            others
            and isinstance(client, redis.Redis)
            and all(isinstance(c, ScriptCall) and c.client is client for c in calls)
        ):
            return _pipelined(client, calls)  # type: ignore[arg-type]  # all ScriptCall, checked above
        return [self.alone(), *(other.send()[0] for other in others)]

    def alone(self) -> Exception | None:
        """Sent on its own (a script the server lacks is loaded by redis-py's `Script`)."""
        try:
            reply = self.script(keys=list(self.keys), args=list(self.args), client=self.client)
        except redis.RedisError as exc:
            return _failure(self, exc)
        except Exception as exc:
            return exc
        return _reply(self, reply)

    def run(self) -> None:
        """Sent on its own; raises its outcome's error."""
        error = self.alone()
        if error is not None:
            raise error


def _pipelined(client: redis.Redis, calls: Sequence[ScriptCall]) -> list[Exception | None]:
    pipe = client.pipeline(transaction=False)
    for call in calls:
        pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
    try:
        replies = pipe.execute(raise_on_error=False)
    except redis.RedisError as exc:  # the connection, not a command: none of them is known to have run
        return [_failure(call, exc) for call in calls]
    except Exception as exc:
        return [exc for _ in calls]
    results: list[Exception | None] = []
    for call, reply in zip(calls, replies, strict=True):
        if isinstance(reply, NoScriptError):
            results.append(call.alone())
        elif isinstance(reply, redis.RedisError):
            results.append(_failure(call, reply))
        else:
            results.append(_reply(call, reply))
    return results


def _reply(call: ScriptCall, reply: Any) -> Exception | None:
    """The call's outcome of `reply`; an error reading it (a reply of another shape) is one too,
    so that `send` never raises."""
    try:
        return call.replied(reply)
    except Exception as exc:
        return exc


def _failure(call: ScriptCall, exc: redis.RedisError) -> Exception | None:
    """The call's outcome of `exc`, caused by it (as `raise ... from exc` would say)."""
    error = call.failed(exc)
    if error is not None and error.__cause__ is None:
        error.__cause__ = exc
    return error
