"""The error lines of the stack's processes, from the logs supervisord keeps (`.state/logs/TYPE.log`).

Every process logs in the project's text format (observability/logs.py): a line starts
with its local time, `2026-01-02 15:04:05,123 LEVEL [kind pid] logger: message`; a
traceback follows on lines of its own. A line without a time belongs to the last line
that had one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) (\w+) ")
#: Levels that say something went wrong (Dramatiq logs a lost Redis connection as CRITICAL).
ERROR_LEVELS = frozenset({"ERROR", "CRITICAL"})


@dataclass(frozen=True)
class LogLine:
    path: Path
    when: float | None  # wall clock of the line (or of the last stamped line before it)
    text: str

    def __str__(self) -> str:
        return f"{self.path.name}: {self.text}"


def error_lines(path: Path) -> list[LogLine]:
    """The lines at ERROR or CRITICAL, and tracebacks, each with its time."""
    found = []
    when: float | None = None
    text = path.read_text(errors="replace") if path.exists() else ""
    for line in text.splitlines():
        match = _STAMP.match(line)
        if match:
            stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")
            when = stamp.timestamp() + int(match.group(2)) / 1000
            if match.group(3) in ERROR_LEVELS:
                found.append(LogLine(path, when, line))
        elif line.startswith("Traceback") or ("Error:" in line and not line.startswith(" ")):
            found.append(LogLine(path, when, line))
    return found


def errors_outside(paths: list[Path], windows: list[tuple[float, float]]) -> list[LogLine]:
    """Error lines of `paths` logged outside every (start, end) window of an expected fault."""
    return [
        line
        for path in paths
        for line in error_lines(path)
        if line.when is None or not any(start <= line.when <= end for start, end in windows)
    ]
