"""Script calls of the Redis adapters sent together (`services.usecases.prepared.PreparedCall` on Redis).

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

from services.usecases.prepared import PreparedCall, outcome


@dataclass(frozen=True)
class ScriptCall:
    """A Lua script's call on its registered client, made ready; `failed` makes the store's own
    error of a Redis error (QueueUnavailable, AutosaveUnavailable, ...)."""

    script: Script
    keys: Sequence[str]
    args: Sequence[Any]
    failed: Callable[[redis.RedisError], Exception]

    def send(self, *others: PreparedCall) -> list[Exception | None]:
        calls = (self, *others)
        client = self.script.registered_client
        if (
            others
            and isinstance(client, redis.Redis)
            and all(isinstance(c, ScriptCall) and c.script.registered_client is client for c in calls)
        ):
            return _pipelined(client, calls)  # type: ignore[arg-type]  # all ScriptCall, checked above
        return [self.alone(), *(other.send()[0] for other in others)]

    def alone(self) -> Exception | None:
        """Sent on its own (a script the server lacks is loaded by redis-py's `Script`)."""
        return outcome(self.run)

    def run(self) -> Any:
        try:
            return self.script(keys=list(self.keys), args=list(self.args))
        except redis.RedisError as exc:
            raise self.failed(exc) from exc


def _pipelined(client: redis.Redis, calls: Sequence[ScriptCall]) -> list[Exception | None]:
    pipe = client.pipeline(transaction=False)
    for call in calls:
        pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
    try:
        replies = pipe.execute(raise_on_error=False)
    except redis.RedisError as exc:  # the connection, not a command: none of them is known to have run
        return [call.failed(exc) for call in calls]
    except Exception as exc:
        return [exc for _ in calls]
    results: list[Exception | None] = []
    for call, reply in zip(calls, replies, strict=True):
        if isinstance(reply, NoScriptError):
            results.append(call.alone())
        elif isinstance(reply, redis.RedisError):
            results.append(call.failed(reply))
        else:
            results.append(None)
    return results
