"""The project's own files as a clone or an unpacked archive holds them, found without git.

A new machine may have no git at all (the README's only prerequisite is make; a release
archive has no `.git`), so tests that look through the sources walk the tree themselves,
leaving out what the tooling makes (virtualenvs, `.state`, caches, build output).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Folders the tooling makes, never part of the sources.
GENERATED = frozenset(
    {".git", ".venv", ".state", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "build", "dist"}
)


def project_files(root: Path = ROOT) -> list[Path]:
    """Every file of the project under `root`, sorted, without the folders the tooling makes."""
    found: list[Path] = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [
            d
            for d in subfolders
            if d not in GENERATED and not d.endswith(".egg-info") and not d.startswith(".venv")
        ]
        found.extend(Path(folder) / name for name in files)
    return sorted(found)


def grep(pattern: str, files: Iterable[Path], root: Path = ROOT) -> list[str]:
    """`path:line:text` for each line of `files` matching the regular expression `pattern`."""
    regex = re.compile(pattern)
    hits: list[str] = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            if regex.search(line):
                hits.append(f"{path.relative_to(root)}:{number}:{line}")
    return hits


def python_files(*packages: str, exclude: Iterable[str] = (), root: Path = ROOT) -> list[Path]:
    """The `.py` files of the project (or of the given top-level folders), minus `exclude` folders."""
    skipped = tuple(exclude)
    files = [p for p in project_files(root) if p.suffix == ".py"]
    relative = [(p, p.relative_to(root).parts) for p in files]
    return [p for p, parts in relative if (not packages or parts[0] in packages) and parts[0] not in skipped]
