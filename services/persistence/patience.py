"""Run a database step again while the database cannot be reached, for a while: the release
step's (migrations, the questionnaire) at a start that races PostgreSQL's own.

Found by the soak: `make run` started again while PostgreSQL restarted failed its release
step and started nothing, three times in an hour. A service manager would start it again
too, but every process then waits for its restart delay; a release step that waits for
its database, as the processes' availability gate does, starts the stack as soon as the
database answers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy.exc

from services.domain.errors import DatabaseUnavailable

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: How long the release step waits for a database it cannot reach (`mi-assessment-migrate --wait`).
DEFAULT_WAIT_S = 60.0
#: Pause between two tries, doubling up to the most.
FIRST_PAUSE_S = 0.5
MAX_PAUSE_S = 5.0


class DatabaseNotReached(Exception):
    """The database could not be reached within the wait (the last error's first line)."""


def unreachable(exc: BaseException) -> str | None:
    """The first line of what says the database cannot be reached, or None for another error."""
    if isinstance(exc, sqlalchemy.exc.OperationalError):
        text = str(exc.orig or exc)
    elif isinstance(exc, DatabaseUnavailable):
        text = str(exc)
    else:
        return None
    return (text.strip().splitlines() or ["database unavailable"])[0]


def patiently(
    what: str,
    action: Callable[[], T],
    *,
    wait_s: float = DEFAULT_WAIT_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`action()`, run again while the database cannot be reached, for up to `wait_s` (one
    warning line, one when it answered). Other errors propagate at once. A step run again
    must be safe to run again: the migrations (each in a transaction) and the questionnaire
    (an upsert) are. Raises `DatabaseNotReached` when the time is up."""
    deadline = clock() + wait_s
    pause = FIRST_PAUSE_S
    tries = 0
    while True:
        tries += 1
        try:
            result = action()
        except Exception as exc:
            reason = unreachable(exc)
            if reason is None:
                raise
            if clock() + pause > deadline:
                raise DatabaseNotReached(reason) from exc
            if tries == 1:
                logger.warning(
                    "%s: the database cannot be reached (%s); trying again for up to %.0f s",
                    what,
                    reason,
                    wait_s,
                )
            sleep(pause)
            pause = min(pause * 2, MAX_PAUSE_S)
            continue
        if tries > 1:
            logger.warning("%s: the database answered after %d tries", what, tries)
        return result
