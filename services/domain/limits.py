"""The domain's numeric limits and the strict-int check, defined once for every layer.

Pure (standard library only), so the web tier, the workers and the wire-format module
actors/message.py import it without pulling in a framework. Record statuses and their
bounds live in services/domain/status.py, next to the enum they derive from.
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


#: Longest name an admin may give themselves at the console's sign-in (the audit names
#: them "console:<name>", within the event log's 64-character actor column).
MAX_ADMIN_NAME_LENGTH = 32
#: Whitespace a typed name may hold (each run is shown as one space).
_NAME_SPACES = frozenset(" \t\u3000")


def is_display_text(text: str, max_length: int) -> bool:
    """Text that shows as what it is: 1..`max_length` characters, every one printable.

    Python's "printable" leaves out every control (NUL, ESC, BEL: Cc), format character
    (the bidi overrides U+202A..U+202E and U+2066..U+2069, zero-width ones: Cf), surrogate,
    private-use and unassigned code point and every separator but the ASCII space: no
    name can hide, reorder or fake another one on a page or a terminal, and PostgreSQL
    (which refuses NUL) can store it.
    """
    return 1 <= len(text) <= max_length and text.isprintable()


def admin_name(typed: str) -> str | None:
    """The name typed at sign-in with its whitespace runs made single spaces, if it is
    display text of at most MAX_ADMIN_NAME_LENGTH characters; else None ("" stays "")."""
    if any(not (c.isprintable() or c in _NAME_SPACES) for c in typed):
        return None
    name = " ".join(typed.split())
    if name == "":
        return ""
    return name if is_display_text(name, MAX_ADMIN_NAME_LENGTH) else None


def escape_controls(text: str) -> str:
    """`text` with every character that is not printable as its escape (\\x1b, \\u202e):
    what a terminal shows of a stored text can be trusted to be that text."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
