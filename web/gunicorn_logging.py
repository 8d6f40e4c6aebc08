"""gunicorn's logger with this project's format (the Procfile's ``--logger-class``).

gunicorn configures its own `gunicorn.error` and `gunicorn.access` loggers; this class
lets it, then gives their handlers the format of observability/logs.py (`LOG_FORMAT`:
plain text by default, JSON lines with `json`), and sends the application's own loggers
(the root logger) to stderr in the same format, so web's lines look like every
process's. The access line's text stays gunicorn's `--access-logformat`, with one
change: the signature of a signed report link (``/reports/<id>?s=...``, a bearer
credential for a week) is written as `REDACTED`, wherever it appears (request line, query
string, Referer): whoever reads a log cannot open the reports in it.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from gunicorn.glogging import Logger, SafeAtoms

from observability.logs import ContextFilter, configure_logging, formatter, log_format

#: The `s` parameter of a query string (the report page's signed link), up to its end.
_SIGNED_PARAMETER = re.compile(r"(?i)((?:^|[?&;]|%3F|%26)s=)[^&;\s\"]*")
REDACTED = "REDACTED"


def redact(text: str) -> str:
    """`text` with the value of every `s=` query parameter replaced by REDACTED."""
    return _SIGNED_PARAMETER.sub(rf"\1{REDACTED}", text)


class RedactedAtoms(SafeAtoms):  # type: ignore[misc]  # gunicorn has no type hints
    """gunicorn's atoms of an access line (`SafeAtoms`: quotes escaped, a missing atom "-"),
    with every `s=` value redacted first."""

    def __init__(self, atoms: dict[str, Any]) -> None:
        # "s=" in value.lower(), without lowering every atom of every request's line.
        super().__init__(
            {
                key: redact(value) if isinstance(value, str) and ("s=" in value or "S=" in value) else value
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
