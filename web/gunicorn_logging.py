"""gunicorn's logger with this project's format (the Procfile's ``--logger-class``).

gunicorn configures its own `gunicorn.error` and `gunicorn.access` loggers; this class
lets it, then gives their handlers the format of observability/logs.py (`LOG_FORMAT`:
plain text by default, JSON lines with `json`), and sends the application's own loggers
(the root logger) to stderr in the same format, so web's lines look like every
process's. The access line's text stays gunicorn's `--access-logformat`, with one
change: the signature of a signed report link (``/reports/<id>?s=...``, a bearer
credential for a week) is written as `REDACTED`, wherever it appears (request line, query
string, Referer). A parameter is recognised by its name as the application reads it,
percent-decoded (``%73=`` is ``s=`` to Werkzeug) and in any case: whoever reads a log
cannot open the reports in it.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import unquote_plus

from gunicorn.glogging import Logger, SafeAtoms

from observability.logs import ContextFilter, configure_logging, formatter, log_format

#: The report link's signature parameter (web/report_page.py reads ``request.args["s"]``).
SIGNATURE_PARAMETER = "s"
REDACTED = "REDACTED"
#: Where a query starts (also percent-encoded, as in a Referer that quotes a link) and runs to.
_QUERY = re.compile(r"(\?|%3[Ff])([^\s\"#]*)")
#: What separates a query's parameters: Werkzeug's "&", and ";" and "%26" to be safe.
_SEPARATOR = re.compile(r"(&|;|%26)")
#: Percent-decoding rounds: a link quoted inside another URL is encoded once more.
_DECODE_ROUNDS = 3


def _names_signature(name: str) -> bool:
    for _ in range(_DECODE_ROUNDS):
        decoded = unquote_plus(name)
        if decoded == name:
            break
        name = decoded
    return name.strip().lower() == SIGNATURE_PARAMETER


def _redact_query(query: str) -> str:
    pieces = _SEPARATOR.split(query)  # parameters at even indexes, separators between them
    for i in range(0, len(pieces), 2):
        name, equals, _ = pieces[i].partition("=")
        if equals and _names_signature(name):
            pieces[i] = f"{name}={REDACTED}"
    return "".join(pieces)


def redact(text: str) -> str:
    """`text` with the value of every signature parameter replaced by REDACTED: in each query
    of the text (after "?"), or in the whole text when it is a bare query (no "?", no space)."""
    if "?" not in text and "%3" not in text.upper():
        return text if any(c.isspace() for c in text) else _redact_query(text)
    return _QUERY.sub(lambda match: match.group(1) + _redact_query(match.group(2)), text)


class RedactedAtoms(SafeAtoms):  # type: ignore[misc]  # gunicorn has no type hints
    """gunicorn's atoms of an access line (`SafeAtoms`: quotes escaped, a missing atom "-"),
    with every signature redacted first."""

    def __init__(self, atoms: dict[str, Any]) -> None:
        # Only atoms that can hold a parameter are parsed.
        super().__init__(
            {
                key: redact(value) if isinstance(value, str) and "=" in value else value
                for key, value in atoms.items()
            }
        )


class ProjectLogger(Logger):  # type: ignore[misc]  # gunicorn has no type hints
    atoms_wrapper_class = RedactedAtoms

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        fmt = formatter(log_format())
        context = ContextFilter("web")
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(fmt)
                handler.addFilter(context)
        configure_logging("web", level=logging.INFO)
