"""Bulk writes that isolate the rows the database refuses, so one bad item never blocks a batch.

The hot-path loops write hundreds of items per statement. Validation before the write
catches the bad data we know of; `write_isolating` is the fallback for what it misses:
when the batch is refused for a reason that lies in the data (`is_data_error`), it is
bisected in savepoints until each refused item stands alone, and every other item is
written. Any other error (the connection, a timeout, a deadlock) propagates, so the
caller puts the whole batch back and retries it later: nothing is lost either way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.orm import Session

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: SQLSTATE classes caused by the values written, not by the server or the connection:
#: 22 data exception (encoding, range, syntax of a value), 23 integrity constraint
#: violation, 54 program limit exceeded (e.g. a jsonb nested too deep, a row too big).
DATA_SQLSTATE_CLASSES = frozenset({"22", "23", "54"})

#: Raised by the driver or by Python while adapting a parameter (a lone surrogate cannot be
#: encoded, an int does not fit): the statement never reached the server.
CLIENT_DATA_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,  # UnicodeEncodeError and UnicodeDecodeError are ValueErrors
    TypeError,
    OverflowError,
    RecursionError,
)


def is_data_error(exc: BaseException) -> bool:
    """Whether `exc` is about the data written (retrying the same data fails again)."""
    if isinstance(exc, DBAPIError):
        state = getattr(exc.orig, "sqlstate", None)
        if isinstance(state, str) and len(state) == 5:
            return state[:2] in DATA_SQLSTATE_CLASSES
        # psycopg refuses some values before sending them (a NUL in text): DataError, no SQLSTATE.
        return type(exc).__name__ in {"DataError", "IntegrityError"}
    if isinstance(exc, StatementError):
        return isinstance(exc.orig, CLIENT_DATA_ERRORS)
    return isinstance(exc, CLIENT_DATA_ERRORS)


def write_isolating(
    session: Session, items: Sequence[T], write: Callable[[Session, Sequence[T]], int]
) -> tuple[int, list[T]]:
    """Write `items` with `write(session, items)` in the caller's transaction.

    Returns (rows written, items refused). When the database refuses a set of items for
    a data reason, the set is halved and each half tried again, each in a savepoint, so
    k bad items among n cost about 2·k·log2(n) extra statements and every good item is
    written. Errors that are not data errors propagate (the caller rolls back and
    retries the whole batch later).
    """
    refused: list[T] = []
    rows = _write_or_split(session, list(items), write, refused)
    return rows, refused


def _write_or_split(
    session: Session, items: list[T], write: Callable[[Session, Sequence[T]], int], refused: list[T]
) -> int:
    if not items:
        return 0
    try:
        with session.begin_nested():
            return write(session, items)
    except Exception as exc:
        if not is_data_error(exc):
            raise
        if len(items) == 1:
            refused.append(items[0])
            logger.debug("the database refused one item: %s", exc)
            return 0
    middle = len(items) // 2
    return _write_or_split(session, items[:middle], write, refused) + _write_or_split(
        session, items[middle:], write, refused
    )
