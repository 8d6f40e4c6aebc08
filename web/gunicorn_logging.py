"""gunicorn's logger with this project's format (the Procfile's ``--logger-class``).

gunicorn configures its own `gunicorn.error` and `gunicorn.access` loggers; this class
lets it, then gives their handlers the format of actors/observe/logs.py (`LOG_FORMAT`:
plain text by default, JSON lines with `json`), and sends the application's own loggers
(the root logger) to stderr in the same format, so web's lines look like every
process's. The access line's text stays gunicorn's `--access-logformat`.
"""

from __future__ import annotations

import logging
from typing import Any

from gunicorn.glogging import Logger

from actors.observe.logs import ContextFilter, configure_logging, formatter, log_format


class ProjectLogger(Logger):  # type: ignore[misc]  # gunicorn has no type hints
    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        fmt = formatter(log_format())
        context = ContextFilter("web")
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(fmt)
                handler.addFilter(context)
        configure_logging("web", level=logging.INFO)
