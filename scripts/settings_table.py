"""README's configuration table, generated from the settings object (config/settings.py).

    python -m scripts.settings_table            # rewrite the table in README.md
    python -m scripts.settings_table --check    # exit 1 when README.md's table differs

The table is the one under "## Configuration": from its header line to the first blank line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from config.variables import configuration_table

README = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
SECTION = "# Configuration"
HEADER = "| variable | default | used by | meaning |"


def table_span(text: str) -> tuple[int, int]:
    """Where README's configuration table starts and ends (character offsets)."""
    start = text.index(HEADER, text.index(SECTION))
    end = text.find("\n\n", start)
    return start, (len(text) if end == -1 else end + 1)


def current_table(text: str) -> str:
    start, end = table_span(text)
    return text[start:end]


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    start, end = table_span(text)
    generated = configuration_table()
    if "--check" in argv:
        if text[start:end] != generated:
            print("README.md's configuration table differs from config/settings.py")
            print("rewrite it: python -m scripts.settings_table")
            return 1
        return 0
    README.write_text(text[:start] + generated + text[end:], encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
