"""What the Markdown documents point at exists: links, anchors and the commands they show.

    python -m scripts.docs_check        # every problem, one a line; exit 1 when there is one

tests/unit/test_docs.py runs the same checks in `make test`, and asks the CLI's `--help` of
every `flask --app web …` command a document shows (that needs the app; this script does not).

- **Code blocks.** Every fenced block is closed.
- **Links.** Every relative link or image `[text](target)` of a Markdown file (outside code)
  names a file or folder of the repository, and its `#anchor`, if any, a heading of the
  Markdown file it names, slugged as GitHub slugs headings (`heading_anchors`).
- **Commands.** In a block marked runnable (```` ```sh ```` or ```` ```bash ````), each
  command line (after `VAR=value` assignments) is checked by its first word: `make X …`
  names Makefile targets, `python -m M` / `.venv/bin/python -m M` a module that exists,
  `.venv/bin/TOOL` a console script of setup.cfg or a tool the virtualenv holds. Other
  commands (curl, redis-cli, systemctl, …) are not checked.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import sys
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Folders never searched for documents: virtualenvs, caches, the stack's state.
SKIPPED_DIRS = {".git", ".state", "build", "node_modules", "__pycache__"}
#: Info strings of the code blocks whose commands are checked.
RUNNABLE = {"sh", "bash"}

_FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_MAKE_TARGETS = re.compile(r"^([A-Za-z0-9_.%+-]+(?:[ \t]+[A-Za-z0-9_.%+-]+)*)[ \t]*:(?!=)")


@dataclass(frozen=True)
class Problem:
    path: Path
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.what}"


def markdown_files(root: Path = ROOT) -> list[Path]:
    """Every Markdown file of the repository (no virtualenv, cache or state folder)."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith((".venv", ".")))
        found.extend(Path(folder, name) for name in sorted(files) if name.endswith(".md"))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its rendered text lower-cased, every character but
    letters, marks, digits, `_`, `-` and spaces dropped, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    kept = (c for c in text.lower() if c in " -_" or unicodedata.category(c)[0] in "LMN")
    return "".join(kept).replace(" ", "-")


def _lines_outside_code(text: str) -> Iterator[tuple[int, str]]:
    fence = ""
    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line)
        if match:
            marker = match.group(1)
            if not fence:
                fence = marker
            elif marker.startswith(fence[0]) and len(marker) >= len(fence):
                fence = ""
            continue
        if not fence:
            yield number, line


def heading_anchors(text: str) -> set[str]:
    """The anchors of a Markdown text's headings (a repeated one gets `-1`, `-2`, … as on
    GitHub), and those of its `<a name=…>` tags."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in _lines_outside_code(text):
        anchors.update(_HTML_ANCHOR.findall(line))
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchors.add(base if count == 0 else f"{base}-{count}")
    return anchors


def links(text: str) -> Iterator[tuple[int, str]]:
    """(line, target) of each link and image outside code blocks and inline code."""
    for number, line in _lines_outside_code(text):
        for target in _LINK.findall(_INLINE_CODE.sub("", line)):
            yield number, target


def fence_problems(path: Path) -> Iterator[Problem]:
    """A code block never closed: everything after it would render as code."""
    fence, opened = "", 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = _FENCE.match(line)
        if not match:
            continue
        marker = match.group(1)
        if not fence:
            fence, opened = marker, number
        elif marker.startswith(fence[0]) and len(marker) >= len(fence):
            fence = ""
    if fence:
        yield Problem(path, opened, "a code block opened here is never closed")


def link_problems(path: Path) -> Iterator[Problem]:
    text = path.read_text(encoding="utf-8")
    for number, target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            yield Problem(path, number, f"link to a missing file: {target}")
            continue
        if not anchor or resolved.suffix != ".md":
            continue
        if anchor not in heading_anchors(resolved.read_text(encoding="utf-8")):
            yield Problem(path, number, f"link to a missing anchor: {target}")


def runnable_commands(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line, words) of each command line of the runnable blocks: continuation lines
    joined, comments and `VAR=value` prefixes dropped."""
    block = ""
    pending: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line)
        if match:
            block = "" if block else (match.group(2) or "text")
            continue
        if block not in RUNNABLE:
            continue
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending.append(line.rstrip()[:-1])
            continue
        command = " ".join([*pending, line]).strip()
        pending = []
        try:
            words = shlex.split(command, comments=True)
        except ValueError:  # a quote the shell would close on a later line: not ours to check
            continue
        while words and _ASSIGNMENT.match(words[0]):
            words = words[1:]
        if words:
            yield start, words


def make_targets(makefile: Path = ROOT / "Makefile") -> set[str]:
    targets: set[str] = set()
    for line in makefile.read_text(encoding="utf-8").splitlines():
        match = _MAKE_TARGETS.match(line)
        if match and not line.startswith((" ", "\t")):
            targets.update(match.group(1).split())
    return targets


def console_scripts(setup_cfg: Path = ROOT / "setup.cfg") -> set[str]:
    text = setup_cfg.read_text(encoding="utf-8")
    block = re.search(r"^console_scripts\s*=\s*\n((?:[ \t]+.*\n?)+)", text, re.MULTILINE)
    lines = block.group(1).splitlines() if block else []
    return {line.split("=")[0].strip() for line in lines if "=" in line}


def command_problem(words: list[str], targets: set[str]) -> str | None:
    """Why a command a document shows would not run, or None (not checked, or fine)."""
    tool = words[0]
    if tool == "make":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        missing = [name for name in names if name not in targets]
        return f"no Makefile target {', '.join(missing)}" if missing else None
    if tool.startswith(".venv/bin/"):
        tool = tool.removeprefix(".venv/bin/")
        if tool not in console_scripts() and not (Path(sys.executable).parent / tool).exists():
            return f"no console script or virtualenv tool {tool}"
    if tool in {"python", "python3"} and len(words) > 2 and words[1] == "-m":
        module = words[2]
        if importlib.util.find_spec(module.split(".")[0]) is None or not _module_exists(module):
            return f"no module {module}"
    return None


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def command_problems(path: Path, targets: set[str]) -> Iterator[Problem]:
    for number, words in runnable_commands(path.read_text(encoding="utf-8")):
        problem = command_problem(words, targets)
        if problem:
            yield Problem(path, number, f"{problem}: {' '.join(words)}")


def problems() -> list[Problem]:
    targets = make_targets()
    found: list[Problem] = []
    for path in markdown_files():
        found.extend(fence_problems(path))
        found.extend(link_problems(path))
        found.extend(command_problems(path, targets))
    return found


def main() -> int:
    found = problems()
    for problem in found:
        print(problem)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
