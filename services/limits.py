"""The domain's numeric limits and the strict-int check, defined once for every layer.

Pure (standard library only), so the web tier, the workers and the wire-format module
actors/message.py import it without pulling in a framework. Record statuses and their
bounds live in services/status.py, next to the enum they derive from.
"""

from __future__ import annotations

from typing import TypeGuard

#: Largest id of a record or user: PostgreSQL bigint, the original .NET system's long. A
#: larger int can never name a row (PostgreSQL would raise rather than find nothing), so
#: services treat it as "not found" and the HTTP API refuses it as input.
MAX_ID = 2**63 - 1


def is_strict_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool: Python's True is an int, JSON's true is not a number."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_id(value: object) -> TypeGuard[int]:
    """A strict int in 1..MAX_ID, i.e. a value that may name a row."""
    return is_strict_int(value) and 1 <= value <= MAX_ID
